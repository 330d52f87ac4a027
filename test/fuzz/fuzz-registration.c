/* SPDX-License-Identifier: Apache-2.0 */
/* The plugin registration exchange (csi/registration.c) with a registrar
 * socket that answers anything: its GetInfo reply (PluginInfo: type, name,
 * endpoint, versions) into on_get_info(), and the driver's GetPluginInfo and
 * NodeGetInfo answers that complete a registration into on_plugin_info() and
 * on_node_info().  The calls these start (NotifyRegistrationStatus,
 * GetPluginInfo) are queued on a client whose event loop never runs, and
 * cancelled when the plugin is freed.
 *
 * Those functions are static, so this file includes registration.c itself
 * (the archive's registration.o is then never linked in).
 *
 * Input: byte 0 picks the reply, the rest is its protobuf message. */
#include "csi/csi.pb-c.h"
#include "csi/registration.c"
#include "test/fuzz/fuzz.h"

#define REG_SOCKET "/run/fuzz/plugins_registry/csi.example.com-reg.sock"
#define CSI_SOCKET "/run/fuzz/plugins/csi.example.com/csi.sock"

static sd_event *event;
static CsiClient *client;

enum { REPLY_GET_INFO, REPLY_PLUGIN_INFO, REPLY_NODE_INFO, _REPLY_MAX };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        FUZZ_ASSERT(sd_event_new(&event) >= 0);
        FUZZ_ASSERT(csi_client_new(event, &(CsiClientOptions){}, &client) >= 0);
        return 0;
}

static void reply_plugin_info(Plugin *p, const uint8_t *data, size_t size) {
        Csi__V1__GetPluginInfoResponse *r = csi__v1__get_plugin_info_response__unpack(NULL, size, data);

        if (!r)
                return;
        on_plugin_info(&(CsiStatus){ .code = CSI_CODE_OK, .message = "" },
                       &(CsiPluginInfo){ .name = strempty(r->name), .vendor_version = strempty(r->vendor_version) },
                       p);
        csi__v1__get_plugin_info_response__free_unpacked(r, NULL);
}

static void reply_node_info(Plugin *p, const uint8_t *data, size_t size) {
        Csi__V1__NodeGetInfoResponse *r = csi__v1__node_get_info_response__unpack(NULL, size, data);
        CsiKeyValue *topology = NULL;
        size_t n = 0;

        if (!r)
                return;
        /* The view client.c builds from it. */
        if (r->accessible_topology && r->accessible_topology->n_segments > 0) {
                n = r->accessible_topology->n_segments;
                topology = calloc(n, sizeof *topology);
                FUZZ_ASSERT(topology);
                for (size_t i = 0; i < n; i++)
                        topology[i] = (CsiKeyValue){ strempty(r->accessible_topology->segments[i]->key),
                                                     strempty(r->accessible_topology->segments[i]->value) };
        }
        on_node_info(&(CsiStatus){ .code = CSI_CODE_OK, .message = "" },
                     &(CsiNodeInfo){ .node_id = strempty(r->node_id),
                                     .max_volumes_per_node = r->max_volumes_per_node,
                                     .topology = topology,
                                     .n_topology = n },
                     p);
        free(topology);
        csi__v1__node_get_info_response__free_unpacked(r, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        CsiRegistration reg = { .client = client, .inotify_fd = -1 };
        Plugin *p;
        uint8_t *copy;
        unsigned which;

        if (size < 1)
                return 0;
        which = data[0] % _REPLY_MAX;
        size--;
        copy = malloc(size ? size : 1);
        FUZZ_ASSERT(copy);
        if (size > 0)
                memcpy(copy, data + 1, size);

        p = calloc(1, sizeof *p);
        FUZZ_ASSERT(p);
        p->reg = &reg;
        p->socket_path = strdup(REG_SOCKET);
        FUZZ_ASSERT(p->socket_path);
        FUZZ_ASSERT(grpc_channel_new(client->transport, REG_SOCKET, 1, &p->reg_channel) >= 0);
        reg.plugins = p;

        if (which == REPLY_GET_INFO)
                on_get_info(NULL, &(GrpcResult){ .code = CSI_CODE_OK, .message = "", .data = copy, .size = size }, p);
        else {
                /* Where GetInfo leaves a plugin: named, versioned, its driver's channel open. */
                p->name = strdup("csi.example.com");
                p->version = strdup("1.0.0");
                FUZZ_ASSERT(p->name && p->version);
                FUZZ_ASSERT(grpc_channel_new(client->transport, CSI_SOCKET, 1, &p->csi_channel) >= 0);
                if (which == REPLY_PLUGIN_INFO)
                        reply_plugin_info(p, copy, size);
                else
                        reply_node_info(p, copy, size);
        }
        /* Registered or not, the plugin goes and takes its calls with it. */
        plugin_free(p);
        FUZZ_ASSERT(!client->registered_drivers);
        free(copy);
        return 0;
}
