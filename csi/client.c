/* SPDX-License-Identifier: Apache-2.0 */
/* The typed CSI calls: C structs in, protobuf on the wire, C structs out; one
 * log line and one metrics sample per call. */
#include <assert.h>
#include <stdio.h>
#include <time.h>

#include "csi/csi.pb-c.h"
#include "csi/internal.h"
#include "systemd/log.h"
#include "systemd/validate.h"

static uint64_t now_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

typedef union CsiCallback {
        csi_done_t done;
        csi_plugin_info_done_t plugin_info;
        csi_plugin_capabilities_done_t plugin_capabilities;
        csi_probe_done_t probe;
        csi_node_capabilities_done_t node_capabilities;
        csi_node_info_done_t node_info;
        csi_volume_stats_done_t volume_stats;
        csi_expand_done_t expand;
} CsiCallback;

typedef struct CsiMethod CsiMethod;

struct CsiCall {
        CsiClient *client;
        const CsiMethod *method;
        GrpcCall *grpc;
        char *driver;
        char *volume_handle;
        char *pod, *pod_uid;       /* POD=, POD_UID= of its lines: csi_call_set_pod() */
        sd_event_source *slow;     /* the "still in flight" line, once (CSI_CALL_SLOW_FRACTION) */
        bool quiet;                /* failures at debug level: csi_call_set_quiet() */
        uint64_t timeout_usec;
        uint64_t start_usec;
        bool migrated; /* csi_call_mark_migrated() */
        CsiCallback cb;
        void *userdata;
        CsiCall *prev, *next;
};

/* Converts the unpacked response to the C view and calls the callback; with
 * resp NULL (an error) it passes the status only. */
typedef int (*deliver_t)(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp);

struct CsiMethod {
        const char *path;
        const char *name;
        const ProtobufCMessageDescriptor *response;
        deliver_t deliver;
        bool mutating; /* logged at info level when it succeeds */
};

/* ---- responses ------------------------------------------------------------ */

static int deliver_empty(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        call->cb.done(st, call->userdata);
        return 0;
}

/* Map entries of <string, string> all share this layout. */
typedef struct StringEntry {
        ProtobufCMessage base;
        char *key;
        char *value;
} StringEntry;

static int map_view(void *const *entries, size_t n, CsiKeyValue **ret) {
        CsiKeyValue *kv = NULL;

        if (n > 0) {
                kv = calloc(n, sizeof *kv);
                if (!kv)
                        return -ENOMEM;
                for (size_t i = 0; i < n; i++) {
                        const StringEntry *e = entries[i];
                        kv[i] = (CsiKeyValue){ strempty(e->key), strempty(e->value) };
                }
        }
        *ret = kv;
        return 0;
}

static int deliver_plugin_info(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__GetPluginInfoResponse *r = (const void *) resp;
        _cleanup_free_ CsiKeyValue *manifest = NULL;

        if (!r) {
                call->cb.plugin_info(st, NULL, call->userdata);
                return 0;
        }
        if (map_view((void *const *) r->manifest, r->n_manifest, &manifest) < 0)
                return -ENOMEM;
        call->cb.plugin_info(st,
                             &(CsiPluginInfo){ .name = strempty(r->name),
                                               .vendor_version = strempty(r->vendor_version),
                                               .manifest = manifest,
                                               .n_manifest = r->n_manifest },
                             call->userdata);
        return 0;
}

static int deliver_plugin_capabilities(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__GetPluginCapabilitiesResponse *r = (const void *) resp;
        CsiPluginCapabilities caps = {};

        if (!r) {
                call->cb.plugin_capabilities(st, NULL, call->userdata);
                return 0;
        }
        for (size_t i = 0; i < r->n_capabilities; i++) {
                const Csi__V1__PluginCapability *pc = r->capabilities[i];
                if (pc->type_case == CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE && pc->service)
                        switch (pc->service->type) {
                        case CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE:
                                caps.controller_service = true;
                                break;
                        case CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS:
                                caps.volume_accessibility_constraints = true;
                                break;
                        case CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__GROUP_CONTROLLER_SERVICE:
                                caps.group_controller_service = true;
                                break;
                        case CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__SNAPSHOT_METADATA_SERVICE:
                                caps.snapshot_metadata_service = true;
                                break;
                        default:
                                break;
                        }
                else if (pc->type_case == CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION && pc->volume_expansion)
                        switch (pc->volume_expansion->type) {
                        case CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE:
                                caps.volume_expansion = CSI_VOLUME_EXPANSION_ONLINE;
                                break;
                        case CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__OFFLINE:
                                caps.volume_expansion = CSI_VOLUME_EXPANSION_OFFLINE;
                                break;
                        default:
                                break;
                        }
        }
        call->cb.plugin_capabilities(st, &caps, call->userdata);
        return 0;
}

static int deliver_probe(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__ProbeResponse *r = (const void *) resp;

        if (!r) {
                call->cb.probe(st, NULL, call->userdata);
                return 0;
        }
        call->cb.probe(st, &(CsiProbeResult){ .has_ready = !!r->ready, .ready = r->ready && r->ready->value },
                       call->userdata);
        return 0;
}

static int deliver_node_capabilities(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__NodeGetCapabilitiesResponse *r = (const void *) resp;
        CsiNodeCapabilities caps = {};

        if (!r) {
                call->cb.node_capabilities(st, NULL, call->userdata);
                return 0;
        }
        for (size_t i = 0; i < r->n_capabilities; i++) {
                const Csi__V1__NodeServiceCapability *nc = r->capabilities[i];
                if (nc->type_case == CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC && nc->rpc && nc->rpc->type > 0 &&
                    nc->rpc->type < 32)
                        caps.mask |= UINT32_C(1) << nc->rpc->type;
        }
        call->cb.node_capabilities(st, &caps, call->userdata);
        return 0;
}

static int deliver_node_info(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__NodeGetInfoResponse *r = (const void *) resp;
        _cleanup_free_ CsiKeyValue *topology = NULL;
        size_t n_topology = 0;

        if (!r) {
                call->cb.node_info(st, NULL, call->userdata);
                return 0;
        }
        if (r->accessible_topology) {
                n_topology = r->accessible_topology->n_segments;
                if (map_view((void *const *) r->accessible_topology->segments, n_topology, &topology) < 0)
                        return -ENOMEM;
        }
        call->cb.node_info(st,
                           &(CsiNodeInfo){ .node_id = strempty(r->node_id),
                                           .max_volumes_per_node = r->max_volumes_per_node,
                                           .topology = topology,
                                           .n_topology = n_topology },
                           call->userdata);
        return 0;
}

static int deliver_volume_stats(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__NodeGetVolumeStatsResponse *r = (const void *) resp;
        _cleanup_free_ CsiVolumeUsage *usage = NULL;

        if (!r) {
                call->cb.volume_stats(st, NULL, call->userdata);
                return 0;
        }
        if (r->n_usage > 0) {
                usage = calloc(r->n_usage, sizeof *usage);
                if (!usage)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < r->n_usage; i++)
                usage[i] = (CsiVolumeUsage){ .available = r->usage[i]->available,
                                             .total = r->usage[i]->total,
                                             .used = r->usage[i]->used,
                                             .unit = (CsiVolumeUsageUnit) r->usage[i]->unit };
        call->cb.volume_stats(st,
                              &(CsiVolumeStats){
                                      .usage = usage,
                                      .n_usage = r->n_usage,
                                      .has_condition = !!r->volume_condition,
                                      .abnormal = r->volume_condition && r->volume_condition->abnormal,
                                      .condition_message = r->volume_condition ? strempty(r->volume_condition->message)
                                                                               : "",
                              },
                              call->userdata);
        return 0;
}

static int deliver_expand(CsiCall *call, const CsiStatus *st, const ProtobufCMessage *resp) {
        const Csi__V1__NodeExpandVolumeResponse *r = (const void *) resp;

        if (!r) {
                call->cb.expand(st, NULL, call->userdata);
                return 0;
        }
        call->cb.expand(st, &(CsiExpandResult){ .capacity_bytes = r->capacity_bytes }, call->userdata);
        return 0;
}

#define IDENTITY "/csi.v1.Identity/"
#define NODE "/csi.v1.Node/"

static const CsiMethod method_get_plugin_info = { IDENTITY "GetPluginInfo", "GetPluginInfo",
                                                  &csi__v1__get_plugin_info_response__descriptor,
                                                  deliver_plugin_info, false };
static const CsiMethod method_get_plugin_capabilities = { IDENTITY "GetPluginCapabilities",
                                                          "GetPluginCapabilities",
                                                          &csi__v1__get_plugin_capabilities_response__descriptor,
                                                          deliver_plugin_capabilities, false };
static const CsiMethod method_probe = { IDENTITY "Probe", "Probe", &csi__v1__probe_response__descriptor,
                                        deliver_probe, false };
static const CsiMethod method_node_get_capabilities = { NODE "NodeGetCapabilities", "NodeGetCapabilities",
                                                        &csi__v1__node_get_capabilities_response__descriptor,
                                                        deliver_node_capabilities, false };
static const CsiMethod method_node_get_info = { NODE "NodeGetInfo", "NodeGetInfo",
                                                &csi__v1__node_get_info_response__descriptor, deliver_node_info,
                                                false };
static const CsiMethod method_node_stage = { NODE "NodeStageVolume", "NodeStageVolume",
                                             &csi__v1__node_stage_volume_response__descriptor, deliver_empty,
                                             true };
static const CsiMethod method_node_unstage = { NODE "NodeUnstageVolume", "NodeUnstageVolume",
                                               &csi__v1__node_unstage_volume_response__descriptor, deliver_empty,
                                               true };
static const CsiMethod method_node_publish = { NODE "NodePublishVolume", "NodePublishVolume",
                                               &csi__v1__node_publish_volume_response__descriptor, deliver_empty,
                                               true };
static const CsiMethod method_node_unpublish = { NODE "NodeUnpublishVolume", "NodeUnpublishVolume",
                                                 &csi__v1__node_unpublish_volume_response__descriptor,
                                                 deliver_empty, true };
static const CsiMethod method_node_get_volume_stats = { NODE "NodeGetVolumeStats", "NodeGetVolumeStats",
                                                        &csi__v1__node_get_volume_stats_response__descriptor,
                                                        deliver_volume_stats, false };
static const CsiMethod method_node_expand = { NODE "NodeExpandVolume", "NodeExpandVolume",
                                              &csi__v1__node_expand_volume_response__descriptor, deliver_expand,
                                              true };

/* ---- call life cycle ------------------------------------------------------- */

static void call_unlink(CsiCall *call) {
        CsiClient *c = call->client;
        if (call->prev)
                call->prev->next = call->next;
        else if (c->calls == call)
                c->calls = call->next;
        if (call->next)
                call->next->prev = call->prev;
        call->prev = call->next = NULL;
}

static CsiCall *csi_call_free(CsiCall *call) {
        if (!call)
                return NULL;
        sd_event_source_disable_unref(call->slow);
        free(call->driver);
        free(call->volume_handle);
        free(call->pod);
        free(call->pod_uid);
        free(call);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(CsiCall *, csi_call_free);

/* The one log line and the metrics sample of a finished call. */
static void call_report(CsiCall *call, const CsiStatus *st) {
        CsiClient *c = call->client;
        const char *code = csi_code_name(st->code);
        int level = st->code == CSI_CODE_OK ? (call->method->mutating ? LOG_INFO : LOG_DEBUG)
                    : call->quiet           ? LOG_DEBUG
                                            : LOG_WARNING;
        LogFields fields = {
                .pod_uid = call->pod_uid,
                .pod = call->pod,
                .driver = call->driver,
                .volume_handle = call->volume_handle,
                .csi_method = call->method->name,
                .csi_code = code,
        };

        if (st->code == CSI_CODE_OK)
                log_fields(level, &fields, "%s%s%s%s%s on %s: OK (%.3f ms)", call->method->name,
                           call->volume_handle ? " of " : "", strempty(call->volume_handle),
                           call->pod ? " for pod " : "", strempty(call->pod), call->driver,
                           (double) st->duration_usec / USEC_PER_MSEC);
        else
                log_fields(level, &fields, "%s%s%s%s%s on %s: %s: %s (%.3f ms)", call->method->name,
                           call->volume_handle ? " of " : "", strempty(call->volume_handle),
                           call->pod ? " for pod " : "", strempty(call->pod), call->driver, code, st->message,
                           (double) st->duration_usec / USEC_PER_MSEC);

        if (c->metrics_hook)
                c->metrics_hook(&(CsiCallMetrics){ .driver = call->driver,
                                                   .method = call->method->path,
                                                   .code = st->code,
                                                   .migrated = call->migrated,
                                                   .duration_usec = st->duration_usec },
                                c->metrics_userdata);
}

static void on_grpc_done(GrpcCall *g, const GrpcResult *r, void *userdata) {
        CsiCall *call = userdata;
        ProtobufCMessage *resp = NULL;
        CsiStatus st = {
                .code = r->code,
                .message = r->message,
                .driver = call->driver,
                .method = call->method->path,
                .duration_usec = r->duration_usec,
        };

        call->grpc = NULL;
        call_unlink(call);
        if (st.code == CSI_CODE_OK) {
                resp = protobuf_c_message_unpack(call->method->response, NULL, r->size, r->data);
                if (!resp) {
                        st.code = CSI_CODE_INTERNAL;
                        st.message = "grpc: error unmarshalling response: invalid protobuf";
                }
        }
        call_report(call, &st);
        if (call->method->deliver(call, &st, resp) < 0) {
                /* Only the C view failed to build: still one callback per call. */
                CsiStatus oom = st;
                oom.code = CSI_CODE_RESOURCE_EXHAUSTED;
                oom.message = "out of memory decoding the response";
                (void) call->method->deliver(call, &oom, NULL);
        }
        if (resp)
                protobuf_c_message_free_unpacked(resp, NULL);
        csi_call_free(call);
}

/* A call that changes a mount and has not returned after a quarter of its
 * timeout (30 s of the default 2 min) says so, once: a hung driver was
 * silent until the timeout, and an operator looking at a stuck pod saw
 * nothing in the journal.  A fraction of the timeout, not a fixed time, so
 * that a node configured with long calls (call-timeout = 10m for a slow
 * backend) is not told of every ordinary call.  The stats, identity and
 * info calls are left out: the stats have their own "unresponsive" report,
 * and those run every round. */
#define CSI_CALL_SLOW_FRACTION 4

static int on_call_slow(sd_event_source *s, uint64_t usec, void *userdata) {
        CsiCall *call = userdata;
        LogFields fields = { .pod_uid = call->pod_uid,
                             .pod = call->pod,
                             .driver = call->driver,
                             .volume_handle = call->volume_handle,
                             .csi_method = call->method->name };

        call->slow = sd_event_source_disable_unref(call->slow);
        log_fields(LOG_WARNING, &fields,
                   "%s%s%s%s%s on %s has been in flight for %.0f s without an answer (it times out after %.0f s): "
                   "the driver is slow or hung; check its log",
                   call->method->name, call->volume_handle ? " of " : "", strempty(call->volume_handle),
                   call->pod ? " for pod " : "", strempty(call->pod), call->driver,
                   (double) (now_usec() - call->start_usec) / USEC_PER_SEC,
                   (double) call->timeout_usec / USEC_PER_SEC);
        return 0;
}

static void call_arm_slow(CsiCall *call) {
        CsiClient *c = call->client;

        if (!call->method->mutating || call->timeout_usec == 0)
                return;
        if (sd_event_add_time_relative(c->event, &call->slow, CLOCK_MONOTONIC,
                                       call->timeout_usec / CSI_CALL_SLOW_FRACTION, USEC_PER_SEC / 10, on_call_slow,
                                       call) < 0)
                call->slow = NULL; /* only a log line is lost */
}

void csi_call_set_quiet(CsiCall *call) {
        if (call)
                call->quiet = true;
}

void csi_call_set_pod(CsiCall *call, const char *pod, const char *pod_uid) {
        if (!call)
                return;
        /* Only log fields: a failed copy leaves them out. */
        (void) free_and_strdup(&call->pod, pod);
        (void) free_and_strdup(&call->pod_uid, pod_uid);
}

/* timeout_usec: this call's deadline, queue time included. */
static int call_start_timeout(CsiClient *c, GrpcChannel *ch, const char *driver, const CsiMethod *m,
                              const ProtobufCMessage *req, const char *volume_handle, CsiCallback cb,
                              void *userdata, uint64_t timeout_usec, CsiCall **ret_call) {
        _cleanup_(csi_call_freep) CsiCall *call = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        size_t size;
        int r;

        call = calloc(1, sizeof *call);
        if (!call)
                return -ENOMEM;
        call->client = c;
        call->method = m;
        call->start_usec = now_usec();
        call->timeout_usec = timeout_usec;
        call->cb = cb;
        call->userdata = userdata;
        call->driver = strdup(driver);
        if (!call->driver)
                return -ENOMEM;
        if (!isempty(volume_handle)) {
                call->volume_handle = strdup(volume_handle);
                if (!call->volume_handle)
                        return -ENOMEM;
        }

        size = protobuf_c_message_get_packed_size(req);
        buf = malloc(MAX(size, (size_t) 1));
        if (!buf)
                return -ENOMEM;
        if (protobuf_c_message_pack(req, buf) != size) {
                explicit_bzero(buf, size);
                return -EIO;
        }

        if (log_get_max_level() >= LOG_DEBUG) {
                _cleanup_free_ char *text = csi_describe_message(req);
                LogFields fields = { .driver = driver, .volume_handle = volume_handle, .csi_method = m->name };
                log_fields(LOG_DEBUG, &fields, "%s on %s: request %s", m->name, driver, strempty(text));
        }

        r = grpc_channel_call(ch, m->path, buf, size, timeout_usec, on_grpc_done, call, &call->grpc);
        /* The channel has its own copy; this one may carry secrets. */
        explicit_bzero(buf, size);
        if (r < 0)
                return r;
        call_arm_slow(call);
        call->next = c->calls;
        if (c->calls)
                c->calls->prev = call;
        c->calls = call;
        if (ret_call)
                *ret_call = call;
        TAKE_PTR(call);
        return 0;
}

static int call_start(CsiClient *c, GrpcChannel *ch, const char *driver, const CsiMethod *m,
                      const ProtobufCMessage *req, const char *volume_handle, CsiCallback cb, void *userdata,
                      CsiCall **ret_call) {
        return call_start_timeout(c, ch, driver, m, req, volume_handle, cb, userdata, c->call_timeout_usec,
                                  ret_call);
}

static int call_driver(CsiClient *c, const char *driver, const CsiMethod *m, const ProtobufCMessage *req,
                       const char *volume_handle, CsiCallback cb, void *userdata, CsiCall **ret_call) {
        CsiDriver *d;

        if (!c || !driver || !cb.done)
                return -EINVAL;
        d = csi_client_find_driver(c, driver);
        if (!d)
                return -ENOENT;
        return call_start(c, d->channel, d->name, m, req, volume_handle, cb, userdata, ret_call);
}

void csi_call_cancel(CsiCall *call) {
        if (!call)
                return;
        CsiStatus st = {
                .code = CSI_CODE_CANCELLED,
                .message = "call cancelled by the caller",
                .driver = call->driver,
                .method = call->method->path,
                .duration_usec = now_usec() - call->start_usec,
        };
        grpc_call_cancel(call->grpc);
        call->grpc = NULL;
        call_unlink(call);
        call_report(call, &st);
        csi_call_free(call);
}

/* ---- requests --------------------------------------------------------------- */

/* Every allocation made while building one request, freed together. */
typedef struct Arena {
        void **ptrs;
        size_t n, alloc;
        bool failed;
} Arena;

static void *arena_alloc(Arena *a, size_t size) {
        void *p;

        if (a->failed)
                return NULL;
        if (a->n == a->alloc) {
                size_t na = MAX((size_t) 8, a->alloc * 2);
                void **np = realloc(a->ptrs, na * sizeof *np);
                if (!np) {
                        a->failed = true;
                        return NULL;
                }
                a->ptrs = np;
                a->alloc = na;
        }
        p = calloc(1, MAX(size, (size_t) 1));
        if (!p) {
                a->failed = true;
                return NULL;
        }
        return a->ptrs[a->n++] = p;
}

static void arena_done(Arena *a) {
        for (size_t i = 0; i < a->n; i++)
                free(a->ptrs[i]);
        free(a->ptrs);
}

/* protobuf-c wants char * where we hold const char *: it only reads them. */
static char *str(const char *s) {
        return (char *) strempty(s);
}

static StringEntry **build_map(Arena *a, const ProtobufCMessageDescriptor *entry_desc, const CsiKeyValue *kv,
                               size_t n, size_t *ret_n) {
        StringEntry **ptrs, *entries;

        *ret_n = 0;
        if (n == 0 || !kv)
                return NULL;
        assert(entry_desc->sizeof_message == sizeof(StringEntry));
        ptrs = arena_alloc(a, n * sizeof *ptrs);
        entries = arena_alloc(a, n * sizeof *entries);
        if (!ptrs || !entries)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                protobuf_c_message_init(entry_desc, &entries[i]);
                entries[i].key = str(kv[i].key);
                entries[i].value = str(kv[i].value);
                ptrs[i] = &entries[i];
        }
        *ret_n = n;
        return ptrs;
}

static Csi__V1__VolumeCapability *build_capability(Arena *a, const CsiVolumeCapability *vc) {
        Csi__V1__VolumeCapability *cap;
        Csi__V1__VolumeCapability__AccessMode *mode;

        if (!vc)
                return NULL;
        cap = arena_alloc(a, sizeof *cap);
        mode = arena_alloc(a, sizeof *mode);
        if (!cap || !mode)
                return NULL;
        csi__v1__volume_capability__init(cap);
        csi__v1__volume_capability__access_mode__init(mode);
        mode->mode = (Csi__V1__VolumeCapability__AccessMode__Mode) vc->access_mode;
        cap->access_mode = mode;
        if (vc->access_type == CSI_ACCESS_TYPE_BLOCK) {
                Csi__V1__VolumeCapability__BlockVolume *block = arena_alloc(a, sizeof *block);
                if (!block)
                        return NULL;
                csi__v1__volume_capability__block_volume__init(block);
                cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
                cap->block = block;
        } else {
                Csi__V1__VolumeCapability__MountVolume *mount = arena_alloc(a, sizeof *mount);
                if (!mount)
                        return NULL;
                csi__v1__volume_capability__mount_volume__init(mount);
                mount->fs_type = str(vc->fs_type);
                if (vc->n_mount_flags > 0) {
                        mount->mount_flags = arena_alloc(a, vc->n_mount_flags * sizeof(char *));
                        if (!mount->mount_flags)
                                return NULL;
                        for (size_t i = 0; i < vc->n_mount_flags; i++)
                                mount->mount_flags[i] = str(vc->mount_flags[i]);
                        mount->n_mount_flags = vc->n_mount_flags;
                }
                mount->volume_mount_group = str(vc->volume_mount_group);
                cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
                cap->mount = mount;
        }
        return cap;
}

/* Empty request messages of the calls that take no arguments. */
int csi_get_plugin_info_on(CsiClient *c, GrpcChannel *ch, const char *driver, csi_plugin_info_done_t done,
                           void *userdata, CsiCall **ret_call) {
        Csi__V1__GetPluginInfoRequest req = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;
        if (!done)
                return -EINVAL;
        return call_start(c, ch, driver, &method_get_plugin_info, &req.base, NULL,
                          (CsiCallback){ .plugin_info = done }, userdata, ret_call);
}

int csi_node_get_info_on(CsiClient *c, GrpcChannel *ch, const char *driver, csi_node_info_done_t done,
                         void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeGetInfoRequest req = CSI__V1__NODE_GET_INFO_REQUEST__INIT;
        if (!done)
                return -EINVAL;
        return call_start(c, ch, driver, &method_node_get_info, &req.base, NULL, (CsiCallback){ .node_info = done },
                          userdata, ret_call);
}

int csi_get_plugin_info(CsiClient *c, const char *driver, csi_plugin_info_done_t done, void *userdata,
                        CsiCall **ret_call) {
        Csi__V1__GetPluginInfoRequest req = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;
        return call_driver(c, driver, &method_get_plugin_info, &req.base, NULL, (CsiCallback){ .plugin_info = done },
                           userdata, ret_call);
}

int csi_get_plugin_capabilities(CsiClient *c, const char *driver, csi_plugin_capabilities_done_t done,
                                void *userdata, CsiCall **ret_call) {
        Csi__V1__GetPluginCapabilitiesRequest req = CSI__V1__GET_PLUGIN_CAPABILITIES_REQUEST__INIT;
        return call_driver(c, driver, &method_get_plugin_capabilities, &req.base, NULL,
                           (CsiCallback){ .plugin_capabilities = done }, userdata, ret_call);
}

int csi_probe(CsiClient *c, const char *driver, csi_probe_done_t done, void *userdata, CsiCall **ret_call) {
        Csi__V1__ProbeRequest req = CSI__V1__PROBE_REQUEST__INIT;
        return call_driver(c, driver, &method_probe, &req.base, NULL, (CsiCallback){ .probe = done }, userdata,
                           ret_call);
}

int csi_node_get_capabilities(CsiClient *c, const char *driver, csi_node_capabilities_done_t done,
                              void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeGetCapabilitiesRequest req = CSI__V1__NODE_GET_CAPABILITIES_REQUEST__INIT;
        return call_driver(c, driver, &method_node_get_capabilities, &req.base, NULL,
                           (CsiCallback){ .node_capabilities = done }, userdata, ret_call);
}

int csi_node_get_info(CsiClient *c, const char *driver, csi_node_info_done_t done, void *userdata,
                      CsiCall **ret_call) {
        Csi__V1__NodeGetInfoRequest req = CSI__V1__NODE_GET_INFO_REQUEST__INIT;
        return call_driver(c, driver, &method_node_get_info, &req.base, NULL, (CsiCallback){ .node_info = done },
                           userdata, ret_call);
}

int csi_node_stage_volume(CsiClient *c, const char *driver, const CsiNodeStageVolumeRequest *in, csi_done_t done,
                          void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeStageVolumeRequest req = CSI__V1__NODE_STAGE_VOLUME_REQUEST__INIT;
        Arena a = {};
        int r;

        if (!in || isempty(in->volume_id) || isempty(in->staging_target_path))
                return -EINVAL;
        req.volume_id = str(in->volume_id);
        req.staging_target_path = str(in->staging_target_path);
        req.publish_context = (void *) build_map(
                &a, &csi__v1__node_stage_volume_request__publish_context_entry__descriptor, in->publish_context,
                in->n_publish_context, &req.n_publish_context);
        req.secrets = (void *) build_map(&a, &csi__v1__node_stage_volume_request__secrets_entry__descriptor,
                                         in->secrets, in->n_secrets, &req.n_secrets);
        req.volume_context = (void *) build_map(
                &a, &csi__v1__node_stage_volume_request__volume_context_entry__descriptor, in->volume_context,
                in->n_volume_context, &req.n_volume_context);
        req.volume_capability = build_capability(&a, in->volume_capability);
        r = a.failed ? -ENOMEM
                     : call_driver(c, driver, &method_node_stage, &req.base, in->volume_id,
                                   (CsiCallback){ .done = done }, userdata, ret_call);
        arena_done(&a);
        return r;
}

int csi_node_unstage_volume(CsiClient *c, const char *driver, const CsiNodeUnstageVolumeRequest *in,
                            csi_done_t done, void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeUnstageVolumeRequest req = CSI__V1__NODE_UNSTAGE_VOLUME_REQUEST__INIT;

        if (!in || isempty(in->volume_id) || isempty(in->staging_target_path))
                return -EINVAL;
        req.volume_id = str(in->volume_id);
        req.staging_target_path = str(in->staging_target_path);
        return call_driver(c, driver, &method_node_unstage, &req.base, in->volume_id, (CsiCallback){ .done = done },
                           userdata, ret_call);
}

int csi_node_publish_volume(CsiClient *c, const char *driver, const CsiNodePublishVolumeRequest *in,
                            csi_done_t done, void *userdata, CsiCall **ret_call) {
        Csi__V1__NodePublishVolumeRequest req = CSI__V1__NODE_PUBLISH_VOLUME_REQUEST__INIT;
        Arena a = {};
        int r;

        if (!in || isempty(in->volume_id) || isempty(in->target_path))
                return -EINVAL;
        req.volume_id = str(in->volume_id);
        req.staging_target_path = str(in->staging_target_path);
        req.target_path = str(in->target_path);
        req.readonly = in->readonly;
        req.publish_context = (void *) build_map(
                &a, &csi__v1__node_publish_volume_request__publish_context_entry__descriptor, in->publish_context,
                in->n_publish_context, &req.n_publish_context);
        req.secrets = (void *) build_map(&a, &csi__v1__node_publish_volume_request__secrets_entry__descriptor,
                                         in->secrets, in->n_secrets, &req.n_secrets);
        req.volume_context = (void *) build_map(
                &a, &csi__v1__node_publish_volume_request__volume_context_entry__descriptor, in->volume_context,
                in->n_volume_context, &req.n_volume_context);
        req.volume_capability = build_capability(&a, in->volume_capability);
        r = a.failed ? -ENOMEM
                     : call_driver(c, driver, &method_node_publish, &req.base, in->volume_id,
                                   (CsiCallback){ .done = done }, userdata, ret_call);
        arena_done(&a);
        return r;
}

int csi_node_unpublish_volume(CsiClient *c, const char *driver, const CsiNodeUnpublishVolumeRequest *in,
                              csi_done_t done, void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeUnpublishVolumeRequest req = CSI__V1__NODE_UNPUBLISH_VOLUME_REQUEST__INIT;

        if (!in || isempty(in->volume_id) || isempty(in->target_path))
                return -EINVAL;
        req.volume_id = str(in->volume_id);
        req.target_path = str(in->target_path);
        return call_driver(c, driver, &method_node_unpublish, &req.base, in->volume_id,
                           (CsiCallback){ .done = done }, userdata, ret_call);
}

int csi_node_get_volume_stats(CsiClient *c, const char *driver, const CsiNodeGetVolumeStatsRequest *in,
                              csi_volume_stats_done_t done, void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeGetVolumeStatsRequest req = CSI__V1__NODE_GET_VOLUME_STATS_REQUEST__INIT;
        CsiDriver *d;
        int r;

        if (!in || isempty(in->volume_id) || isempty(in->volume_path))
                return -EINVAL;
        if (!c || !driver || !done)
                return -EINVAL;
        d = csi_client_find_driver(c, driver);
        if (!d)
                return -ENOENT;
        /* Stats calls have their own small limit on a channel of their own:
         * however many hang, they never take a max-parallel slot that a
         * stage or publish waits for (kubernetes#103728). */
        if (!d->stats_channel) {
                r = grpc_channel_new(c->transport, grpc_channel_socket_path(d->channel), CSI_STATS_MAX_PARALLEL,
                                     &d->stats_channel);
                if (r < 0)
                        return r;
        }
        req.volume_id = str(in->volume_id);
        req.volume_path = str(in->volume_path);
        req.staging_target_path = str(in->staging_target_path);
        return call_start_timeout(c, d->stats_channel, d->name, &method_node_get_volume_stats, &req.base,
                                  in->volume_id, (CsiCallback){ .volume_stats = done }, userdata,
                                  in->timeout_usec ?: c->call_timeout_usec, ret_call);
}

int csi_node_expand_volume(CsiClient *c, const char *driver, const CsiNodeExpandVolumeRequest *in,
                           csi_expand_done_t done, void *userdata, CsiCall **ret_call) {
        Csi__V1__NodeExpandVolumeRequest req = CSI__V1__NODE_EXPAND_VOLUME_REQUEST__INIT;
        Csi__V1__CapacityRange range = CSI__V1__CAPACITY_RANGE__INIT;
        Arena a = {};
        int r;

        if (!in || isempty(in->volume_id) || isempty(in->volume_path))
                return -EINVAL;
        req.volume_id = str(in->volume_id);
        req.volume_path = str(in->volume_path);
        req.staging_target_path = str(in->staging_target_path);
        if (in->has_capacity_range) {
                range.required_bytes = in->required_bytes;
                range.limit_bytes = in->limit_bytes;
                req.capacity_range = &range;
        }
        req.secrets = (void *) build_map(&a, &csi__v1__node_expand_volume_request__secrets_entry__descriptor,
                                         in->secrets, in->n_secrets, &req.n_secrets);
        req.volume_capability = build_capability(&a, in->volume_capability);
        r = a.failed ? -ENOMEM
                     : call_driver(c, driver, &method_node_expand, &req.base, in->volume_id,
                                   (CsiCallback){ .expand = done }, userdata, ret_call);
        arena_done(&a);
        return r;
}

/* ---- the client and its drivers --------------------------------------------- */

static CsiDriver *driver_free(CsiDriver *d) {
        if (!d)
                return NULL;
        grpc_channel_unref(d->channel);
        grpc_channel_unref(d->stats_channel);
        free(d->name);
        free(d->registration_socket);
        free(d->version);
        free(d);
        return NULL;
}

static CsiDriver *find_in(CsiDriver *list, const char *name) {
        for (CsiDriver *d = list; d; d = d->next)
                if (streq(d->name, name))
                        return d;
        return NULL;
}

CsiDriver *csi_client_find_driver(CsiClient *c, const char *name) {
        CsiDriver *d = find_in(c->registered_drivers, name);
        return d ? d : find_in(c->static_drivers, name);
}

bool csi_client_has_driver(CsiClient *c, const char *driver) {
        return c && driver && csi_client_find_driver(c, driver);
}

int csi_client_add_registered(CsiClient *c, const char *name, GrpcChannel *ch, const char *registration_socket,
                              const char *version) {
        CsiDriver *d = calloc(1, sizeof *d);

        if (!d)
                return -ENOMEM;
        d->name = strdup(name);
        d->registration_socket = strdup(registration_socket);
        d->version = strdup(strempty(version));
        if (!d->name || !d->registration_socket || !d->version) {
                driver_free(d);
                return -ENOMEM;
        }
        /* A re-registration under the same name replaces the old entry. */
        for (CsiDriver **p = &c->registered_drivers; *p; p = &(*p)->next)
                if (streq((*p)->name, name)) {
                        CsiDriver *old = *p;
                        *p = old->next;
                        driver_free(old);
                        break;
                }
        d->channel = grpc_channel_ref(ch);
        d->next = c->registered_drivers;
        c->registered_drivers = d;
        return 0;
}

bool csi_client_remove_registered(CsiClient *c, const char *name, const char *registration_socket) {
        for (CsiDriver **p = &c->registered_drivers; *p; p = &(*p)->next)
                if (streq((*p)->name, name) && streq_ptr((*p)->registration_socket, registration_socket)) {
                        CsiDriver *old = *p;
                        *p = old->next;
                        driver_free(old);
                        return true;
                }
        return false;
}

int csi_client_new(sd_event *event, const CsiClientOptions *o, CsiClient **ret) {
        _cleanup_(csi_client_freep) CsiClient *c = NULL;
        int r;

        if (!event || !o || !ret)
                return -EINVAL;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event = sd_event_ref(event);
        c->call_timeout_usec = o->call_timeout_usec ?: CSI_DEFAULT_CALL_TIMEOUT_USEC;
        c->registration_timeout_usec = o->registration_timeout_usec ?: CSI_DEFAULT_REGISTRATION_TIMEOUT_USEC;
        c->max_parallel = o->max_parallel ?: CSI_DEFAULT_MAX_PARALLEL;
        if (!isempty(o->registration_dir)) {
                if (o->registration_dir[0] != '/')
                        return -EINVAL;
                c->registration_dir = strdup(o->registration_dir);
                if (!c->registration_dir)
                        return -ENOMEM;
        }
        r = grpc_transport_new(event,
                               &(GrpcTransportOptions){ .max_receive_bytes = o->max_receive_bytes,
                                                        .reuse = o->connection_reuse },
                               &c->transport);
        if (r < 0)
                return r;

        for (size_t i = 0; i < o->n_drivers; i++) {
                const char *path;
                CsiDriver *d;

                if (validate_csi_driver_name(o->drivers[i].name) < 0 ||
                    unix_endpoint_path(o->drivers[i].endpoint, &path) < 0)
                        return log_error_errno(EINVAL, "Invalid CSI driver \"%s\" at \"%s\".",
                                               strempty(o->drivers[i].name), strempty(o->drivers[i].endpoint));
                if (find_in(c->static_drivers, o->drivers[i].name))
                        return log_error_errno(EINVAL, "CSI driver \"%s\" configured twice.", o->drivers[i].name);
                d = calloc(1, sizeof *d);
                if (!d)
                        return -ENOMEM;
                d->next = c->static_drivers;
                c->static_drivers = d;
                d->name = strdup(o->drivers[i].name);
                if (!d->name)
                        return -ENOMEM;
                r = grpc_channel_new(c->transport, path, c->max_parallel, &d->channel);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

CsiClient *csi_client_free(CsiClient *c) {
        if (!c)
                return NULL;
        c->registration = csi_registration_free(c->registration);
        c->static_probes = csi_static_drivers_free(c->static_probes);
        while (c->calls) {
                CsiCall *call = c->calls;
                grpc_call_cancel(call->grpc);
                call_unlink(call);
                csi_call_free(call);
        }
        while (c->static_drivers) {
                CsiDriver *d = c->static_drivers;
                c->static_drivers = d->next;
                driver_free(d);
        }
        while (c->registered_drivers) {
                CsiDriver *d = c->registered_drivers;
                c->registered_drivers = d->next;
                driver_free(d);
        }
        grpc_transport_free(c->transport);
        free(c->refusal_reason);
        sd_event_unref(c->event);
        free(c->registration_dir);
        free(c);
        return NULL;
}

void csi_client_set_limits(CsiClient *c, uint64_t call_timeout_usec, unsigned max_parallel) {
        c->call_timeout_usec = call_timeout_usec ?: CSI_DEFAULT_CALL_TIMEOUT_USEC;
        c->max_parallel = max_parallel ?: CSI_DEFAULT_MAX_PARALLEL;
        for (CsiDriver *d = c->static_drivers; d; d = d->next)
                grpc_channel_set_max_parallel(d->channel, c->max_parallel);
        for (CsiDriver *d = c->registered_drivers; d; d = d->next)
                grpc_channel_set_max_parallel(d->channel, c->max_parallel);
}

static const CsiDriverEndpoint *find_endpoint(const CsiDriverEndpoint *drivers, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (streq(drivers[i].name, name))
                        return &drivers[i];
        return NULL;
}

int csi_client_set_static_drivers(CsiClient *c, const CsiDriverEndpoint *drivers, size_t n_drivers) {
        const char *path;
        int r;

        /* All or nothing: a list that does not validate changes nothing. */
        for (size_t i = 0; i < n_drivers; i++) {
                if (validate_csi_driver_name(drivers[i].name) < 0 || unix_endpoint_path(drivers[i].endpoint, &path) < 0)
                        return log_error_errno(EINVAL, "Invalid CSI driver \"%s\" at \"%s\".",
                                               strempty(drivers[i].name), strempty(drivers[i].endpoint));
                if (find_endpoint(drivers, i, drivers[i].name))
                        return log_error_errno(EINVAL, "CSI driver \"%s\" configured twice.", drivers[i].name);
        }
        /* The probes hold the channels of the old list: rebuilt below. */
        c->static_probes = csi_static_drivers_free(c->static_probes);
        for (CsiDriver **p = &c->static_drivers; *p;) {
                CsiDriver *d = *p;
                const CsiDriverEndpoint *e = find_endpoint(drivers, n_drivers, d->name);
                if (e && unix_endpoint_path(e->endpoint, &path) >= 0 &&
                    streq(path, grpc_channel_socket_path(d->channel))) {
                        p = &d->next;
                        continue;
                }
                *p = d->next;
                log_fields(LOG_INFO, &(LogFields){ .driver = d->name },
                           "CSI driver %s at %s is no longer configured", d->name,
                           grpc_channel_socket_path(d->channel));
                /* No registration socket: it was configured statically. */
                if (c->registration_cb.deregistered)
                        c->registration_cb.deregistered(c, d->name, NULL, c->registration_userdata);
                driver_free(d);
        }
        for (size_t i = 0; i < n_drivers; i++) {
                CsiDriver *d;
                if (find_in(c->static_drivers, drivers[i].name))
                        continue;
                (void) unix_endpoint_path(drivers[i].endpoint, &path);
                d = calloc(1, sizeof *d);
                if (!d)
                        return -ENOMEM;
                d->name = strdup(drivers[i].name);
                r = d->name ? grpc_channel_new(c->transport, path, c->max_parallel, &d->channel) : -ENOMEM;
                if (r < 0) {
                        driver_free(d);
                        return r;
                }
                d->next = c->static_drivers;
                c->static_drivers = d;
                log_fields(LOG_INFO, &(LogFields){ .driver = d->name }, "CSI driver %s configured at %s", d->name,
                           path);
        }
        return c->static_drivers ? csi_static_drivers_start(c, &c->static_probes) : 0;
}

static void driver_calls_add(const CsiDriver *d, unsigned *in_flight, unsigned *queued) {
        *in_flight += grpc_channel_in_flight(d->channel);
        *queued += grpc_channel_queued(d->channel);
        if (d->stats_channel) {
                *in_flight += grpc_channel_in_flight(d->stats_channel);
                *queued += grpc_channel_queued(d->stats_channel);
        }
}

void csi_client_foreach_driver_calls(CsiClient *c, csi_driver_calls_t cb, void *userdata) {
        /* A name both registered and configured is one driver: its calls are summed. */
        for (const CsiDriver *d = c->registered_drivers; d; d = d->next) {
                const CsiDriver *s = find_in(c->static_drivers, d->name);
                unsigned in_flight = 0, queued = 0;
                driver_calls_add(d, &in_flight, &queued);
                if (s)
                        driver_calls_add(s, &in_flight, &queued);
                cb(d->name, in_flight, queued, userdata);
        }
        for (const CsiDriver *d = c->static_drivers; d; d = d->next) {
                unsigned in_flight = 0, queued = 0;
                if (find_in(c->registered_drivers, d->name))
                        continue;
                driver_calls_add(d, &in_flight, &queued);
                cb(d->name, in_flight, queued, userdata);
        }
}

bool csi_client_reuses_connections(CsiClient *c) {
        return grpc_transport_reuses_connections(c->transport);
}

void csi_call_mark_migrated(CsiCall *call) {
        if (call)
                call->migrated = true;
}

void csi_client_set_metrics_hook(CsiClient *c, csi_metrics_hook_t hook, void *userdata) {
        c->metrics_hook = hook;
        c->metrics_userdata = userdata;
}

void csi_client_set_registration_callbacks(CsiClient *c, const CsiRegistrationCallbacks *cb, void *userdata) {
        c->registration_cb = cb ? *cb : (CsiRegistrationCallbacks){};
        c->registration_userdata = userdata;
}

void csi_client_set_refusal_reason(CsiClient *c, const char *reason) {
        (void) free_and_strdup(&c->refusal_reason, reason);
}

void csi_client_retry_deferred(CsiClient *c) {
        if (c->registration)
                csi_registration_retry_deferred(c->registration);
        if (c->static_probes)
                csi_static_drivers_retry_deferred(c->static_probes);
}

int csi_client_start(CsiClient *c) {
        int r;

        if (c->static_drivers && !c->static_probes) {
                r = csi_static_drivers_start(c, &c->static_probes);
                if (r < 0)
                        return r;
        }
        if (!c->registration_dir || c->registration)
                return 0;
        return csi_registration_new(c, c->registration_dir, &c->registration);
}
