/* SPDX-License-Identifier: Apache-2.0 */
/* Every CSI response kvolumed reads: the protobuf-c unpack of the response
 * type, then csi/client.c's conversion to the C view that the callbacks get,
 * exactly as on_grpc_done() does it.
 *
 * The conversion functions are static, so this file includes client.c itself
 * (the archive's client.o is then never linked in: this file defines all its
 * symbols).  Input: byte 0 picks the method, the rest is the message. */
#include "csi/client.c"
#include "test/fuzz/fuzz.h"

static const CsiMethod *const methods[] = {
        &method_get_plugin_info,   &method_get_plugin_capabilities, &method_probe,
        &method_node_get_capabilities, &method_node_get_info,       &method_node_stage,
        &method_node_unstage,      &method_node_publish,            &method_node_unpublish,
        &method_node_get_volume_stats, &method_node_expand,
};

/* The callbacks read everything they are given, so that ASan sees a view
 * that points anywhere it should not. */
static size_t touched;

static void touch(const char *s) {
        FUZZ_ASSERT(s);
        touched += strlen(s);
}

static void touch_map(const CsiKeyValue *kv, size_t n) {
        FUZZ_ASSERT(n == 0 || kv);
        for (size_t i = 0; i < n; i++) {
                touch(kv[i].key);
                touch(kv[i].value);
        }
}

static void check_status(const CsiStatus *st, const void *view) {
        /* The contract of csi.h: a view exactly when the code is OK. */
        FUZZ_ASSERT((st->code == CSI_CODE_OK) == !!view);
        touch(st->message);
}

static void on_done(const CsiStatus *st, void *userdata) {
        touch(st->message);
}

static void on_plugin_info(const CsiStatus *st, const CsiPluginInfo *info, void *userdata) {
        check_status(st, info);
        if (info) {
                touch(info->name);
                touch(info->vendor_version);
                touch_map(info->manifest, info->n_manifest);
        }
}

static void on_plugin_capabilities(const CsiStatus *st, const CsiPluginCapabilities *caps, void *userdata) {
        check_status(st, caps);
        if (caps)
                FUZZ_ASSERT(caps->volume_expansion <= CSI_VOLUME_EXPANSION_OFFLINE);
}

static void on_probe(const CsiStatus *st, const CsiProbeResult *probe, void *userdata) {
        check_status(st, probe);
        if (probe)
                FUZZ_ASSERT(probe->has_ready || !probe->ready);
}

static void on_node_capabilities(const CsiStatus *st, const CsiNodeCapabilities *caps, void *userdata) {
        check_status(st, caps);
        if (caps)
                FUZZ_ASSERT(!(caps->mask & 1u)); /* type 0 is UNKNOWN, never a capability */
}

static void on_node_info(const CsiStatus *st, const CsiNodeInfo *info, void *userdata) {
        check_status(st, info);
        if (info) {
                touch(info->node_id);
                touch_map(info->topology, info->n_topology);
        }
}

static void on_volume_stats(const CsiStatus *st, const CsiVolumeStats *stats, void *userdata) {
        check_status(st, stats);
        if (stats) {
                FUZZ_ASSERT(stats->n_usage == 0 || stats->usage);
                for (size_t i = 0; i < stats->n_usage; i++)
                        touched += (size_t) stats->usage[i].used;
                touch(stats->condition_message);
        }
}

static void on_expand(const CsiStatus *st, const CsiExpandResult *result, void *userdata) {
        check_status(st, result);
}

static CsiCallback callback_for(const CsiMethod *m) {
        if (m == &method_get_plugin_info)
                return (CsiCallback){ .plugin_info = on_plugin_info };
        if (m == &method_get_plugin_capabilities)
                return (CsiCallback){ .plugin_capabilities = on_plugin_capabilities };
        if (m == &method_probe)
                return (CsiCallback){ .probe = on_probe };
        if (m == &method_node_get_capabilities)
                return (CsiCallback){ .node_capabilities = on_node_capabilities };
        if (m == &method_node_get_info)
                return (CsiCallback){ .node_info = on_node_info };
        if (m == &method_node_get_volume_stats)
                return (CsiCallback){ .volume_stats = on_volume_stats };
        if (m == &method_node_expand)
                return (CsiCallback){ .expand = on_expand };
        return (CsiCallback){ .done = on_done };
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const CsiMethod *m;
        ProtobufCMessage *resp;
        CsiCall call = {};
        CsiStatus st = { .code = CSI_CODE_OK, .message = "", .driver = "csi.example.com" };
        uint8_t *copy;

        if (size < 1)
                return 0;
        m = methods[data[0] % ELEMENTSOF(methods)];
        /* Exactly the message's bytes, as grpc_unframe() hands them over. */
        size--;
        copy = malloc(size ? size : 1);
        FUZZ_ASSERT(copy);
        if (size > 0)
                memcpy(copy, data + 1, size);

        call.method = m;
        call.cb = callback_for(m);
        st.method = m->path;
        resp = protobuf_c_message_unpack(m->response, NULL, size, copy);
        if (!resp) {
                st.code = CSI_CODE_INTERNAL;
                st.message = "grpc: error unmarshalling response: invalid protobuf";
        }
        FUZZ_ASSERT(m->deliver(&call, &st, resp) >= 0);
        if (resp)
                protobuf_c_message_free_unpacked(resp, NULL);
        free(copy);
        return 0;
}
