/* SPDX-License-Identifier: Apache-2.0 */
/* Drives csi/ from the integration tests and the benchmark.
 *
 *   csi-harness [--driver NAME=unix:///path]... [--registration-dir DIR]
 *               [--call-timeout-ms N] [--max-parallel N] [--max-receive BYTES]
 *               [--reuse auto|never] [--log-level LEVEL] [--metrics]
 *               [--refuse-registration ERRNO]
 *
 * Reads one JSON command per line on stdin:
 *   {"id": "1", "method": "NodePublishVolume", "driver": "d", "request": {...}}
 *   {"id": "1", "cancel": true}
 *   {"id": "b", "bench": {"method": ..., "driver": ..., "request": {...},
 *                         "count": 10000, "parallel": 64}}
 * and writes one JSON line per event on stdout: "ready", "result",
 * "cancelled", "bench", "metrics" (with --metrics), "registered",
 * "deregistered", "registration_failed".  End of input: exits once the calls
 * in flight are done. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "csi/csi.h"
#include "systemd/curl-loop.h"
#include "systemd/log.h"

typedef struct Harness Harness;

/* A request decoded from JSON: the C structs point into the cJSON tree and
 * into the arrays here. */
typedef struct Request {
        cJSON *json;
        CsiKeyValue *publish_context, *secrets, *volume_context;
        size_t n_publish_context, n_secrets, n_volume_context;
        const char **mount_flags;
        CsiVolumeCapability cap;
        bool has_cap;
        CsiNodeStageVolumeRequest stage;
        CsiNodeUnstageVolumeRequest unstage;
        CsiNodePublishVolumeRequest publish;
        CsiNodeUnpublishVolumeRequest unpublish;
        CsiNodeGetVolumeStatsRequest stats;
        CsiNodeExpandVolumeRequest expand;
} Request;

typedef struct Bench {
        Harness *h;
        char *id;
        char *method;
        char *driver;
        Request req;
        unsigned count, parallel, started, finished, errors;
        uint64_t *latency_usec;
        uint64_t start_usec;
        char first_error[256];
} Bench;

typedef struct Target Target;

typedef struct Pending {
        Harness *h;
        char *id;
        CsiCall *call;
        Target *target; /* freed by the callback, or by us if it never comes */
        struct Pending *next;
} Pending;

struct Harness {
        sd_event *event;
        CsiClient *client;
        Pending *pending;
        Bench *bench;
        bool eof;
        bool metrics;
        int refuse_registration;
        char *line;
        size_t line_len, line_alloc;
};

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static void emit(cJSON *o) {
        char *s = cJSON_PrintUnformatted(o);
        if (s) {
                fputs(s, stdout);
                fputc('\n', stdout);
                fflush(stdout);
                free(s);
        }
        cJSON_Delete(o);
}

static void maybe_exit(Harness *h) {
        if (h->eof && !h->pending && !h->bench)
                (void) sd_event_exit(h->event, 0);
}

/* ---- JSON → requests --------------------------------------------------------- */

static const char *jstr(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jint(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? (int64_t) v->valuedouble : 0;
}

static CsiKeyValue *jmap(const cJSON *o, const char *key, size_t *ret_n) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, key), *e;
        CsiKeyValue *kv;
        size_t n = 0;

        *ret_n = 0;
        if (!cJSON_IsObject(m))
                return NULL;
        kv = calloc((size_t) cJSON_GetArraySize(m) + 1, sizeof *kv);
        if (!kv)
                return NULL;
        cJSON_ArrayForEach(e, m) if (cJSON_IsString(e)) kv[n++] = (CsiKeyValue){ e->string, e->valuestring };
        *ret_n = n;
        return kv;
}

static const char *const access_modes[] = {
        "UNKNOWN", "SINGLE_NODE_WRITER", "SINGLE_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY",
        "MULTI_NODE_SINGLE_WRITER", "MULTI_NODE_MULTI_WRITER", "SINGLE_NODE_SINGLE_WRITER", "SINGLE_NODE_MULTI_WRITER",
};

static void request_done(Request *r) {
        free(r->publish_context);
        free(r->secrets);
        free(r->volume_context);
        free(r->mount_flags);
        cJSON_Delete(r->json);
        *r = (Request){};
}

static int request_parse(Request *r, const cJSON *in) {
        const cJSON *vc, *mount, *mode, *range;

        *r = (Request){};
        r->json = in ? cJSON_Duplicate(in, true) : cJSON_CreateObject();
        if (!r->json)
                return -ENOMEM;
        const cJSON *j = r->json;

        r->publish_context = jmap(j, "publish_context", &r->n_publish_context);
        r->secrets = jmap(j, "secrets", &r->n_secrets);
        r->volume_context = jmap(j, "volume_context", &r->n_volume_context);

        vc = cJSON_GetObjectItemCaseSensitive(j, "volume_capability");
        if (cJSON_IsObject(vc)) {
                r->has_cap = true;
                mount = cJSON_GetObjectItemCaseSensitive(vc, "mount");
                if (cJSON_GetObjectItemCaseSensitive(vc, "block"))
                        r->cap.access_type = CSI_ACCESS_TYPE_BLOCK;
                else if (cJSON_IsObject(mount)) {
                        const cJSON *flags = cJSON_GetObjectItemCaseSensitive(mount, "mount_flags"), *f;
                        r->cap.access_type = CSI_ACCESS_TYPE_MOUNT;
                        r->cap.fs_type = jstr(mount, "fs_type");
                        r->cap.volume_mount_group = jstr(mount, "volume_mount_group");
                        if (cJSON_IsArray(flags)) {
                                r->mount_flags = calloc((size_t) cJSON_GetArraySize(flags) + 1, sizeof(char *));
                                if (!r->mount_flags)
                                        return -ENOMEM;
                                cJSON_ArrayForEach(f, flags) if (cJSON_IsString(f)) r->mount_flags[r->cap.n_mount_flags++] =
                                        f->valuestring;
                                r->cap.mount_flags = r->mount_flags;
                        }
                }
                mode = cJSON_GetObjectItemCaseSensitive(vc, "access_mode");
                if (cJSON_IsObject(mode))
                        mode = cJSON_GetObjectItemCaseSensitive(mode, "mode");
                if (cJSON_IsNumber(mode))
                        r->cap.access_mode = (CsiAccessMode) mode->valueint;
                else if (cJSON_IsString(mode))
                        for (size_t i = 0; i < ELEMENTSOF(access_modes); i++)
                                if (streq(mode->valuestring, access_modes[i]))
                                        r->cap.access_mode = (CsiAccessMode) i;
        }
        const CsiVolumeCapability *cap = r->has_cap ? &r->cap : NULL;

        r->stage = (CsiNodeStageVolumeRequest){
                .volume_id = jstr(j, "volume_id"),
                .publish_context = r->publish_context,
                .n_publish_context = r->n_publish_context,
                .staging_target_path = jstr(j, "staging_target_path"),
                .volume_capability = cap,
                .secrets = r->secrets,
                .n_secrets = r->n_secrets,
                .volume_context = r->volume_context,
                .n_volume_context = r->n_volume_context,
        };
        r->unstage = (CsiNodeUnstageVolumeRequest){ jstr(j, "volume_id"), jstr(j, "staging_target_path") };
        r->publish = (CsiNodePublishVolumeRequest){
                .volume_id = jstr(j, "volume_id"),
                .publish_context = r->publish_context,
                .n_publish_context = r->n_publish_context,
                .staging_target_path = jstr(j, "staging_target_path"),
                .target_path = jstr(j, "target_path"),
                .volume_capability = cap,
                .readonly = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "readonly")),
                .secrets = r->secrets,
                .n_secrets = r->n_secrets,
                .volume_context = r->volume_context,
                .n_volume_context = r->n_volume_context,
        };
        r->unpublish = (CsiNodeUnpublishVolumeRequest){ jstr(j, "volume_id"), jstr(j, "target_path") };
        r->stats = (CsiNodeGetVolumeStatsRequest){ .volume_id = jstr(j, "volume_id"),
                                                   .volume_path = jstr(j, "volume_path"),
                                                   .staging_target_path = jstr(j, "staging_target_path") };
        range = cJSON_GetObjectItemCaseSensitive(j, "capacity_range");
        r->expand = (CsiNodeExpandVolumeRequest){
                .volume_id = jstr(j, "volume_id"),
                .volume_path = jstr(j, "volume_path"),
                .has_capacity_range = cJSON_IsObject(range),
                .required_bytes = jint(range, "required_bytes"),
                .limit_bytes = jint(range, "limit_bytes"),
                .staging_target_path = jstr(j, "staging_target_path"),
                .volume_capability = cap,
                .secrets = r->secrets,
                .n_secrets = r->n_secrets,
        };
        return 0;
}

/* ---- results → JSON ----------------------------------------------------------- */

struct Target {
        Harness *h;
        char *id;     /* a single call */
        Bench *bench; /* or one of a benchmark's */
};

static cJSON *status_json(const char *id, const CsiStatus *st) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "result");
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "driver", st->driver);
        cJSON_AddStringToObject(o, "method", st->method);
        cJSON_AddStringToObject(o, "code", csi_code_name(st->code));
        cJSON_AddNumberToObject(o, "code_num", st->code);
        cJSON_AddStringToObject(o, "message", st->message);
        cJSON_AddBoolToObject(o, "final", csi_code_is_final(st->code));
        cJSON_AddNumberToObject(o, "duration_ms", (double) st->duration_usec / 1000.0);
        return o;
}

static cJSON *map_json(const CsiKeyValue *kv, size_t n) {
        cJSON *m = cJSON_CreateObject();
        for (size_t i = 0; i < n; i++)
                cJSON_AddStringToObject(m, kv[i].key, kv[i].value);
        return m;
}

static void pending_remove(Harness *h, const char *id) {
        for (Pending **p = &h->pending; *p; p = &(*p)->next)
                if (streq((*p)->id, id)) {
                        Pending *old = *p;
                        *p = old->next;
                        free(old->id);
                        free(old);
                        return;
                }
}

static void bench_next(Bench *b);

/* Finishes one call: bench accounting or the result line. */
static void finish(Target *t, const CsiStatus *st, cJSON *response) {
        Harness *h = t->h;

        if (t->bench) {
                Bench *b = t->bench;
                b->latency_usec[b->finished++] = st->duration_usec;
                if (st->code != CSI_CODE_OK && b->errors++ == 0)
                        snprintf(b->first_error, sizeof b->first_error, "%s: %s", csi_code_name(st->code),
                                 st->message);
                cJSON_Delete(response);
                free(t);
                bench_next(b);
                return;
        }
        cJSON *o = status_json(t->id, st);
        if (response)
                cJSON_AddItemToObject(o, "response", response);
        emit(o);
        pending_remove(h, t->id);
        free(t->id);
        free(t);
        maybe_exit(h);
}

static void on_done(const CsiStatus *st, void *userdata) {
        finish(userdata, st, st->code == CSI_CODE_OK ? cJSON_CreateObject() : NULL);
}

static void on_plugin_info(const CsiStatus *st, const CsiPluginInfo *info, void *userdata) {
        cJSON *r = NULL;
        if (info) {
                r = cJSON_CreateObject();
                cJSON_AddStringToObject(r, "name", info->name);
                cJSON_AddStringToObject(r, "vendor_version", info->vendor_version);
                cJSON_AddItemToObject(r, "manifest", map_json(info->manifest, info->n_manifest));
        }
        finish(userdata, st, r);
}

static void on_plugin_caps(const CsiStatus *st, const CsiPluginCapabilities *caps, void *userdata) {
        cJSON *r = NULL;
        if (caps) {
                r = cJSON_CreateObject();
                cJSON_AddBoolToObject(r, "controller_service", caps->controller_service);
                cJSON_AddBoolToObject(r, "volume_accessibility_constraints", caps->volume_accessibility_constraints);
                cJSON_AddBoolToObject(r, "group_controller_service", caps->group_controller_service);
                cJSON_AddNumberToObject(r, "volume_expansion", caps->volume_expansion);
        }
        finish(userdata, st, r);
}

static void on_probe(const CsiStatus *st, const CsiProbeResult *p, void *userdata) {
        cJSON *r = NULL;
        if (p) {
                r = cJSON_CreateObject();
                if (p->has_ready)
                        cJSON_AddBoolToObject(r, "ready", p->ready);
        }
        finish(userdata, st, r);
}

static const char *const node_caps[] = {
        [CSI_NODE_CAP_STAGE_UNSTAGE_VOLUME] = "STAGE_UNSTAGE_VOLUME",
        [CSI_NODE_CAP_GET_VOLUME_STATS] = "GET_VOLUME_STATS",
        [CSI_NODE_CAP_EXPAND_VOLUME] = "EXPAND_VOLUME",
        [CSI_NODE_CAP_VOLUME_CONDITION] = "VOLUME_CONDITION",
        [CSI_NODE_CAP_SINGLE_NODE_MULTI_WRITER] = "SINGLE_NODE_MULTI_WRITER",
        [CSI_NODE_CAP_VOLUME_MOUNT_GROUP] = "VOLUME_MOUNT_GROUP",
};

static void on_node_caps(const CsiStatus *st, const CsiNodeCapabilities *caps, void *userdata) {
        cJSON *r = NULL;
        if (caps) {
                cJSON *a = cJSON_CreateArray();
                for (unsigned i = 1; i < _CSI_NODE_CAP_MAX; i++)
                        if (csi_node_capabilities_has(caps, (CsiNodeCapability) i))
                                cJSON_AddItemToArray(a, cJSON_CreateString(node_caps[i]));
                r = cJSON_CreateObject();
                cJSON_AddItemToObject(r, "capabilities", a);
        }
        finish(userdata, st, r);
}

static cJSON *node_info_json(const CsiNodeInfo *info) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "node_id", info->node_id);
        cJSON_AddNumberToObject(r, "max_volumes_per_node", (double) info->max_volumes_per_node);
        cJSON_AddItemToObject(r, "accessible_topology", map_json(info->topology, info->n_topology));
        return r;
}

static void on_node_info(const CsiStatus *st, const CsiNodeInfo *info, void *userdata) {
        finish(userdata, st, info ? node_info_json(info) : NULL);
}

static void on_stats(const CsiStatus *st, const CsiVolumeStats *s, void *userdata) {
        cJSON *r = NULL;
        if (s) {
                static const char *const units[] = { "UNKNOWN", "BYTES", "INODES" };
                cJSON *a = cJSON_CreateArray();
                for (size_t i = 0; i < s->n_usage; i++) {
                        cJSON *u = cJSON_CreateObject();
                        cJSON_AddNumberToObject(u, "available", (double) s->usage[i].available);
                        cJSON_AddNumberToObject(u, "total", (double) s->usage[i].total);
                        cJSON_AddNumberToObject(u, "used", (double) s->usage[i].used);
                        cJSON_AddStringToObject(u, "unit", s->usage[i].unit < 3 ? units[s->usage[i].unit] : "?");
                        cJSON_AddItemToArray(a, u);
                }
                r = cJSON_CreateObject();
                cJSON_AddItemToObject(r, "usage", a);
                if (s->has_condition) {
                        cJSON *cnd = cJSON_CreateObject();
                        cJSON_AddBoolToObject(cnd, "abnormal", s->abnormal);
                        cJSON_AddStringToObject(cnd, "message", s->condition_message);
                        cJSON_AddItemToObject(r, "volume_condition", cnd);
                }
        }
        finish(userdata, st, r);
}

static void on_expand(const CsiStatus *st, const CsiExpandResult *e, void *userdata) {
        cJSON *r = NULL;
        if (e) {
                r = cJSON_CreateObject();
                cJSON_AddNumberToObject(r, "capacity_bytes", (double) e->capacity_bytes);
        }
        finish(userdata, st, r);
}

/* Starts one call of "method"; -EOPNOTSUPP for an unknown method. */
static int start(Harness *h, const char *method, const char *driver, Request *r, Target *t, CsiCall **ret) {
        CsiClient *c = h->client;

        if (streq(method, "GetPluginInfo"))
                return csi_get_plugin_info(c, driver, on_plugin_info, t, ret);
        if (streq(method, "GetPluginCapabilities"))
                return csi_get_plugin_capabilities(c, driver, on_plugin_caps, t, ret);
        if (streq(method, "Probe"))
                return csi_probe(c, driver, on_probe, t, ret);
        if (streq(method, "NodeGetCapabilities"))
                return csi_node_get_capabilities(c, driver, on_node_caps, t, ret);
        if (streq(method, "NodeGetInfo"))
                return csi_node_get_info(c, driver, on_node_info, t, ret);
        if (streq(method, "NodeStageVolume"))
                return csi_node_stage_volume(c, driver, &r->stage, on_done, t, ret);
        if (streq(method, "NodeUnstageVolume"))
                return csi_node_unstage_volume(c, driver, &r->unstage, on_done, t, ret);
        if (streq(method, "NodePublishVolume"))
                return csi_node_publish_volume(c, driver, &r->publish, on_done, t, ret);
        if (streq(method, "NodeUnpublishVolume"))
                return csi_node_unpublish_volume(c, driver, &r->unpublish, on_done, t, ret);
        if (streq(method, "NodeGetVolumeStats"))
                return csi_node_get_volume_stats(c, driver, &r->stats, on_stats, t, ret);
        if (streq(method, "NodeExpandVolume"))
                return csi_node_expand_volume(c, driver, &r->expand, on_expand, t, ret);
        return -EOPNOTSUPP;
}

/* ---- benchmark ---------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static void bench_report(Bench *b) {
        Harness *h = b->h;
        double elapsed = (double) (now_usec() - b->start_usec) / 1e6;
        cJSON *o = cJSON_CreateObject();

        qsort(b->latency_usec, b->finished, sizeof *b->latency_usec, cmp_u64);
        cJSON_AddStringToObject(o, "event", "bench");
        cJSON_AddStringToObject(o, "id", b->id);
        cJSON_AddStringToObject(o, "method", b->method);
        cJSON_AddNumberToObject(o, "count", b->finished);
        cJSON_AddNumberToObject(o, "parallel", b->parallel);
        cJSON_AddNumberToObject(o, "errors", b->errors);
        if (b->errors)
                cJSON_AddStringToObject(o, "first_error", b->first_error);
        cJSON_AddNumberToObject(o, "elapsed_s", elapsed);
        cJSON_AddNumberToObject(o, "calls_per_sec", elapsed > 0 ? b->finished / elapsed : 0);
        if (b->finished > 0) {
                cJSON_AddNumberToObject(o, "median_us", (double) b->latency_usec[b->finished / 2]);
                cJSON_AddNumberToObject(o, "p99_us", (double) b->latency_usec[(size_t) (b->finished * 0.99)]);
                cJSON_AddNumberToObject(o, "max_us", (double) b->latency_usec[b->finished - 1]);
        }
        cJSON_AddBoolToObject(o, "reuse", csi_client_reuses_connections(h->client));
        emit(o);
        h->bench = NULL;
        request_done(&b->req);
        free(b->latency_usec);
        free(b->id);
        free(b->method);
        free(b->driver);
        free(b);
        maybe_exit(h);
}

static void bench_next(Bench *b) {
        while (b->started < b->count && b->started - b->finished < b->parallel) {
                Target *t = calloc(1, sizeof *t);
                int r;
                if (!t)
                        abort();
                *t = (Target){ .h = b->h, .bench = b };
                b->started++;
                r = start(b->h, b->method, b->driver, &b->req, t, NULL);
                if (r < 0) {
                        free(t);
                        b->started--;
                        b->count = b->started; /* stop here */
                        snprintf(b->first_error, sizeof b->first_error, "start: %s", strerror(-r));
                        b->errors++;
                }
        }
        if (b->finished == b->count)
                bench_report(b);
}

/* ---- commands ----------------------------------------------------------------- */

static void emit_error(const char *id, const char *what, int r) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "result");
        cJSON_AddStringToObject(o, "id", strempty(id));
        cJSON_AddStringToObject(o, "error", what);
        cJSON_AddNumberToObject(o, "errno", -r);
        cJSON_AddStringToObject(o, "strerror", strerror(-r));
        emit(o);
}

static void command(Harness *h, const char *text) {
        cJSON *cmd = cJSON_Parse(text);
        const char *id, *method, *driver;
        const cJSON *bench;
        int r;

        if (!cmd) {
                emit_error(NULL, "bad JSON", -EINVAL);
                return;
        }
        id = strempty(jstr(cmd, "id"));
        bench = cJSON_GetObjectItemCaseSensitive(cmd, "bench");

        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cmd, "cancel"))) {
                for (Pending *p = h->pending; p; p = p->next)
                        if (streq(p->id, id)) {
                                /* No callback will come to free the target. */
                                csi_call_cancel(p->call);
                                free(p->target->id);
                                free(p->target);
                                cJSON *o = cJSON_CreateObject();
                                cJSON_AddStringToObject(o, "event", "cancelled");
                                cJSON_AddStringToObject(o, "id", id);
                                emit(o);
                                break;
                        }
                pending_remove(h, id);
                maybe_exit(h);
        } else if (cJSON_IsObject(bench) && h->bench)
                emit_error(id, "a benchmark is running", -EBUSY);
        else if (cJSON_IsObject(bench)) {
                Bench *b = calloc(1, sizeof *b);
                if (!b)
                        abort();
                b->h = h;
                b->id = strdup(id);
                b->method = strdup(strempty(jstr(bench, "method")));
                b->driver = strdup(strempty(jstr(bench, "driver")));
                b->count = (unsigned) MAX(jint(bench, "count"), 1);
                b->parallel = (unsigned) MAX(jint(bench, "parallel"), 1);
                b->latency_usec = calloc(b->count, sizeof *b->latency_usec);
                if (!b->id || !b->method || !b->driver || !b->latency_usec ||
                    request_parse(&b->req, cJSON_GetObjectItemCaseSensitive(bench, "request")) < 0)
                        abort();
                h->bench = b;
                b->start_usec = now_usec();
                bench_next(b);
        } else {
                Request *req = calloc(1, sizeof *req);
                Target *t = calloc(1, sizeof *t);
                Pending *p = calloc(1, sizeof *p);
                method = strempty(jstr(cmd, "method"));
                driver = strempty(jstr(cmd, "driver"));
                if (!req || !t || !p || request_parse(req, cJSON_GetObjectItemCaseSensitive(cmd, "request")) < 0)
                        abort();
                *t = (Target){ .h = h, .id = strdup(id) };
                *p = (Pending){ .h = h, .id = strdup(id), .target = t };
                r = start(h, method, driver, req, t, &p->call);
                /* The request was encoded by now. */
                request_done(req);
                free(req);
                if (r < 0) {
                        emit_error(id, r == -EOPNOTSUPP ? "unknown method" : "call not started", r);
                        free(t->id);
                        free(t);
                        free(p->id);
                        free(p);
                } else {
                        p->next = h->pending;
                        h->pending = p;
                }
        }
        cJSON_Delete(cmd);
}

static int on_stdin(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Harness *h = userdata;
        char buf[65536];
        ssize_t n = read(fd, buf, sizeof buf);

        if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return 0;
                h->eof = true;
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                maybe_exit(h);
                return 0;
        }
        for (ssize_t i = 0; i < n; i++) {
                if (buf[i] == '\n') {
                        if (h->line_len > 0) {
                                h->line[h->line_len] = 0;
                                command(h, h->line);
                        }
                        h->line_len = 0;
                        continue;
                }
                if (h->line_len + 2 > h->line_alloc) {
                        h->line_alloc = MAX((size_t) 4096, h->line_alloc * 2);
                        h->line = realloc(h->line, h->line_alloc);
                        if (!h->line)
                                abort();
                }
                h->line[h->line_len++] = buf[i];
        }
        return 0;
}

/* ---- registration and metrics events ------------------------------------------ */

static int on_registered(CsiClient *c, const CsiRegisteredDriver *d, void *userdata) {
        Harness *h = userdata;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "registered");
        cJSON_AddStringToObject(o, "driver", d->name);
        cJSON_AddStringToObject(o, "endpoint", d->endpoint_path);
        cJSON_AddStringToObject(o, "registration_socket", d->registration_socket);
        cJSON_AddStringToObject(o, "version", d->version);
        cJSON_AddItemToObject(o, "node_info", node_info_json(d->node_info));
        if (h->refuse_registration)
                cJSON_AddBoolToObject(o, "refused", true);
        emit(o);
        return h->refuse_registration ? -h->refuse_registration : 0;
}

static void on_deregistered(CsiClient *c, const char *driver, const char *socket, void *userdata) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "deregistered");
        cJSON_AddStringToObject(o, "driver", driver);
        cJSON_AddStringToObject(o, "registration_socket", socket);
        emit(o);
}

static void on_registration_failed(CsiClient *c, const char *socket, const char *reason, void *userdata) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "registration_failed");
        cJSON_AddStringToObject(o, "registration_socket", socket);
        cJSON_AddStringToObject(o, "reason", reason);
        emit(o);
}

static void on_metrics(const CsiCallMetrics *m, void *userdata) {
        Harness *h = userdata;
        if (!h->metrics || h->bench)
                return;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "metrics");
        cJSON_AddStringToObject(o, "driver_name", m->driver);
        cJSON_AddStringToObject(o, "method_name", m->method);
        cJSON_AddStringToObject(o, "grpc_status_code", csi_code_name(m->code));
        cJSON_AddNumberToObject(o, "seconds", (double) m->duration_usec / 1e6);
        emit(o);
}

/* ---- main ---------------------------------------------------------------------- */

int main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "driver", required_argument, NULL, 'd' },
                { "registration-dir", required_argument, NULL, 'r' },
                { "call-timeout-ms", required_argument, NULL, 't' },
                { "max-parallel", required_argument, NULL, 'p' },
                { "max-receive", required_argument, NULL, 'm' },
                { "reuse", required_argument, NULL, 'u' },
                { "log-level", required_argument, NULL, 'l' },
                { "metrics", no_argument, NULL, 'M' },
                { "refuse-registration", required_argument, NULL, 'R' },
                {},
        };
        CsiDriverEndpoint drivers[32];
        CsiClientOptions o = {};
        Harness h = {};
        int c, r;

        log_setup();
        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 'd': {
                        char *eq = strchr(optarg, '=');
                        if (!eq || o.n_drivers >= ELEMENTSOF(drivers)) {
                                fprintf(stderr, "--driver NAME=unix:///path\n");
                                return 2;
                        }
                        *eq = 0;
                        drivers[o.n_drivers++] = (CsiDriverEndpoint){ optarg, eq + 1 };
                        break;
                }
                case 'r':
                        o.registration_dir = optarg;
                        break;
                case 't':
                        o.call_timeout_usec = strtoull(optarg, NULL, 10) * USEC_PER_MSEC;
                        break;
                case 'p':
                        o.max_parallel = (unsigned) strtoul(optarg, NULL, 10);
                        break;
                case 'm':
                        o.max_receive_bytes = strtoull(optarg, NULL, 10);
                        break;
                case 'u':
                        o.connection_reuse = streq(optarg, "never") ? CSI_CONNECTION_REUSE_NEVER
                                                                     : CSI_CONNECTION_REUSE_AUTO;
                        break;
                case 'l':
                        r = log_level_from_string(optarg);
                        if (r < 0) {
                                fprintf(stderr, "bad log level %s\n", optarg);
                                return 2;
                        }
                        log_set_max_level(r);
                        break;
                case 'M':
                        h.metrics = true;
                        break;
                case 'R':
                        h.refuse_registration = atoi(optarg);
                        break;
                default:
                        return 2;
                }
        o.drivers = drivers;

        if (curl_loop_global_init() < 0)
                return 2;
        r = sd_event_default(&h.event);
        if (r < 0)
                return 2;
        r = csi_client_new(h.event, &o, &h.client);
        if (r < 0) {
                fprintf(stderr, "csi_client_new: %s\n", strerror(-r));
                return 2;
        }
        csi_client_set_metrics_hook(h.client, on_metrics, &h);
        csi_client_set_registration_callbacks(h.client,
                                              &(CsiRegistrationCallbacks){ .registered = on_registered,
                                                                           .deregistered = on_deregistered,
                                                                           .failed = on_registration_failed },
                                              &h);
        r = csi_client_start(h.client);
        if (r < 0) {
                fprintf(stderr, "csi_client_start: %s\n", strerror(-r));
                return 2;
        }
        r = sd_event_add_io(h.event, NULL, STDIN_FILENO, EPOLLIN, on_stdin, &h);
        if (r < 0) {
                fprintf(stderr, "stdin: %s\n", strerror(-r));
                return 2;
        }

        cJSON *ready = cJSON_CreateObject();
        cJSON_AddStringToObject(ready, "event", "ready");
        cJSON_AddStringToObject(ready, "libcurl", curl_version_info(CURLVERSION_NOW)->version);
        cJSON_AddBoolToObject(ready, "reuse", csi_client_reuses_connections(h.client));
        emit(ready);

        r = sd_event_loop(h.event);

        /* Calls still pending are cancelled without callbacks. */
        csi_client_free(h.client);
        while (h.pending) {
                Pending *p = h.pending;
                h.pending = p->next;
                free(p->target->id);
                free(p->target);
                free(p->id);
                free(p);
        }
        sd_event_unref(h.event);
        free(h.line);
        curl_global_cleanup();
        return r < 0 ? 1 : 0;
}
