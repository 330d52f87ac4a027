/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "agent/localapi.h"
#include "conf/config.h"
#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/podview.h"

#define JSON "application/json"

typedef enum WaitKind {
        WAIT_NONE,
        WAIT_MOUNTED,
        WAIT_UNMOUNTED,
} WaitKind;

typedef struct Waiter Waiter;

struct LocalApi {
        sd_event *event;
        VolumeManager *m;
        HttpServer *http;
        Waiter *waiters;
        uint64_t wakeups; /* waiters checked after a pass, for the debug log */
};

struct Waiter {
        LocalApi *api;
        HttpRequest *req;
        PodWatch *watch;
        sd_event_source *timer;
        char *uid;
        WaitKind kind;
        Waiter *prev, *next;
};

/* ---- answers ---------------------------------------------------------------------- */

static int reply_json(HttpRequest *req, unsigned status, cJSON *o) {
        char *text = o ? cJSON_PrintUnformatted(o) : NULL;
        char *body = NULL;

        cJSON_Delete(o);
        if (!text || asprintf(&body, "%s\n", text) < 0) {
                free(text);
                return -ENOMEM;
        }
        free(text);
        return http_request_reply(req, status, JSON, body, strlen(body));
}

static int reply_error(HttpRequest *req, unsigned status, const char *format, ...) _printf_(3, 4);
static int reply_error(HttpRequest *req, unsigned status, const char *format, ...) {
        _cleanup_free_ char *message = NULL;
        cJSON *o = cJSON_CreateObject();
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&message, format, ap) < 0)
                message = NULL;
        va_end(ap);
        if (!o || !message) {
                cJSON_Delete(o);
                return -ENOMEM;
        }
        cJSON_AddStringToObject(o, "error", message);
        log_debug("Local API: GET %s: %u %s", http_request_path(req), status, message);
        return reply_json(req, status, o);
}

/* runtime.v1 Mount, in the proto's own field names (protobuf's JSON
 * mapping takes them as they are): a runner passes it to CreateContainer
 * unchanged.  A runner's mount has no host_path and names its volume. */
static cJSON *mount_json(const PodMountView *mv) {
        cJSON *o = cJSON_CreateObject();

        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "container_path", mv->container_path);
        if (mv->host_path)
                cJSON_AddStringToObject(o, "host_path", mv->host_path);
        cJSON_AddBoolToObject(o, "readonly", mv->readonly);
        cJSON_AddBoolToObject(o, "selinux_relabel", mv->selinux_relabel);
        cJSON_AddStringToObject(o, "propagation", mv->propagation);
        cJSON_AddBoolToObject(o, "recursive_read_only", mv->recursive_read_only);
        if (mv->volume)
                cJSON_AddStringToObject(o, "volume", mv->volume);
        return o;
}

/* "containers": [{name, type, mounts, devices, runnerMounts}]: kubelet's
 * makeMounts and makeBlockVolumes for each container of the pod. */
static void add_containers(cJSON *o, const PodView *v) {
        cJSON *list = cJSON_AddArrayToObject(o, "containers");

        for (size_t i = 0; v && list && i < v->n_containers; i++) {
                const PodContainerView *c = &v->containers[i];
                cJSON *e = cJSON_CreateObject(), *mounts, *devices, *runner;

                if (!e)
                        return;
                cJSON_AddItemToArray(list, e);
                cJSON_AddStringToObject(e, "name", c->name);
                cJSON_AddStringToObject(e, "type", c->type);
                mounts = cJSON_AddArrayToObject(e, "mounts");
                for (size_t j = 0; mounts && j < c->n_mounts; j++)
                        cJSON_AddItemToArray(mounts, mount_json(&c->mounts[j]));
                devices = cJSON_AddArrayToObject(e, "devices");
                for (size_t j = 0; devices && j < c->n_devices; j++) {
                        cJSON *d = cJSON_CreateObject();
                        if (!d)
                                return;
                        cJSON_AddStringToObject(d, "container_path", c->devices[j].container_path);
                        cJSON_AddStringToObject(d, "host_path", c->devices[j].host_path);
                        cJSON_AddStringToObject(d, "permissions", c->devices[j].permissions);
                        cJSON_AddItemToArray(devices, d);
                }
                runner = cJSON_AddArrayToObject(e, "runnerMounts");
                for (size_t j = 0; runner && j < c->n_runner_mounts; j++)
                        cJSON_AddItemToArray(runner, mount_json(&c->runner_mounts[j]));
        }
}

/* kubelet's extra supplemental groups (the pods' PV gid annotations), as
 * exact integers: a double would round a gid beyond 2^53. */
static void add_supplemental_groups(cJSON *o, const PodView *v) {
        cJSON *a = cJSON_AddArrayToObject(o, "supplementalGroups");
        char buf[32];

        for (size_t i = 0; a && v && i < v->n_supplemental_groups; i++) {
                snprintf(buf, sizeof buf, "%" PRId64, v->supplemental_groups[i]);
                cJSON_AddItemToArray(a, cJSON_CreateRaw(buf));
        }
}

/* The body of the contract: the pod's volumes, and whether all are
 * mounted or all are torn down; "error" joins the final errors' reasons. */
static cJSON *pod_json(const char *uid, const PodView *v, bool with_error) {
        cJSON *o = cJSON_CreateObject(), *vols;
        char *joined = NULL;
        size_t size = 0;
        FILE *f;

        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "uid", uid);
        if (v && v->pod)
                cJSON_AddStringToObject(o, "pod", v->pod);
        else
                cJSON_AddNullToObject(o, "pod");
        vols = cJSON_AddArrayToObject(o, "volumes");
        f = with_error ? open_memstream(&joined, &size) : NULL;
        for (size_t i = 0; v && vols && i < v->n_volumes; i++) {
                const PodVolumeView *pv = &v->volumes[i];
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", pv->name);
                if (pv->kind)
                        cJSON_AddStringToObject(e, "kind", pv->kind);
                else
                        cJSON_AddNullToObject(e, "kind");
                if (pv->runner_type)
                        cJSON_AddStringToObject(e, "type", pv->runner_type);
                if (pv->driver)
                        cJSON_AddStringToObject(e, "driver", pv->driver);
                else
                        cJSON_AddNullToObject(e, "driver");
                cJSON_AddStringToObject(e, "state",
                                        pv->runner ? "runner" : pod_volume_state_to_string(pv->state));
                if (pv->host_path)
                        cJSON_AddStringToObject(e, "hostPath", pv->host_path);
                else
                        cJSON_AddNullToObject(e, "hostPath");
                cJSON_AddBoolToObject(e, "readOnly", pv->read_only);
                cJSON_AddBoolToObject(e, "block", pv->block);
                if (pv->reason)
                        cJSON_AddStringToObject(e, "reason", pv->reason);
                /* Whether wait=mounted gives up on the failure (409), or a retry may fix it. */
                if (!pv->runner && pv->state == POD_VOLUME_FAILED)
                        cJSON_AddBoolToObject(e, "final", pv->final);
                cJSON_AddItemToArray(vols, e);
                if (f && pv->final)
                        fprintf(f, "%svolume %s: %s", ftell(f) > 0 ? "; " : "", pv->name,
                                strempty(pv->reason));
        }
        if (v && v->reason) {
                cJSON_AddStringToObject(o, "reason", v->reason);
                if (f && v->failed)
                        fprintf(f, "%s%s", ftell(f) > 0 ? "; " : "", v->reason);
        }
        cJSON_AddBoolToObject(o, "allMounted", v ? v->all_mounted : false);
        add_supplemental_groups(o, v);
        add_containers(o, v);
        cJSON_AddBoolToObject(o, "allTornDown", v ? v->all_torn_down : true);
        if (f && fclose(f) == 0 && joined)
                cJSON_AddStringToObject(o, "error", joined);
        free(joined);
        return o;
}

/* ---- waiters ---------------------------------------------------------------------- */

static Waiter *waiter_free(Waiter *w) {
        if (!w)
                return NULL;
        if (w->prev)
                w->prev->next = w->next;
        else if (w->api)
                w->api->waiters = w->next;
        if (w->next)
                w->next->prev = w->prev;
        pod_watch_free(w->watch);
        sd_event_source_disable_unref(w->timer);
        free(w->uid);
        free(w);
        return NULL;
}

/* Answers when the wait is over: 200 reached, 409 a final error (mounted
 * only), or at the timeout 504.  Returns true when answered. */
static bool waiter_check(Waiter *w, bool timed_out) {
        _cleanup_(pod_view_freep) PodView *v = NULL;
        unsigned status = 0;
        int r;

        r = volume_manager_describe_pod(w->api->m, w->uid, &v);
        if (r < 0 && r != -ENOENT) {
                (void) reply_error(w->req, 500, "cannot describe pod %s: %s", w->uid, strerror(-r));
                return true;
        }
        if (w->kind == WAIT_MOUNTED && v && v->all_mounted)
                status = 200;
        else if (w->kind == WAIT_MOUNTED && v && v->failed)
                status = 409;
        else if (w->kind == WAIT_UNMOUNTED && (!v || v->all_torn_down))
                status = 200;
        else if (timed_out)
                status = 504;
        if (status == 0)
                return false;
        log_debug("Local API: wait=%s for pod %s answered %u",
                  w->kind == WAIT_MOUNTED ? "mounted" : "unmounted", w->uid, status);
        cJSON *o = pod_json(w->uid, v, status == 409);
        if (o && status == 504)
                cJSON_AddStringToObject(o, "error",
                                        w->kind == WAIT_MOUNTED
                                                ? "timed out waiting for the pod's volumes to be mounted"
                                                : "timed out waiting for the pod's volumes to be torn down");
        if (reply_json(w->req, status, o) < 0)
                (void) http_request_reply(w->req, 500, JSON, NULL, 0);
        return true;
}

static void on_pod_changed(PodWatch *watch, void *userdata) {
        Waiter *w = userdata;

        w->api->wakeups++;
        log_debug("Local API: waiter for pod %s checked after a pass (%" PRIu64 " checks so far)", w->uid,
                  w->api->wakeups);
        if (waiter_check(w, false))
                waiter_free(w);
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Waiter *w = userdata;
        (void) waiter_check(w, true);
        waiter_free(w);
        return 0;
}

/* The request is gone unanswered: the server stops (it has been answered
 * 503), or the client closed its connection, and its slot is free now. */
static void on_abandoned(HttpRequest *req, void *userdata) {
        Waiter *w = userdata;
        w->req = NULL;
        waiter_free(w);
}

static int start_wait(LocalApi *api, HttpRequest *req, const char *uid, WaitKind kind, uint64_t timeout) {
        Waiter *w;
        int r;

        w = calloc(1, sizeof *w);
        if (!w || !(w->uid = strdup(uid))) {
                free(w);
                return -ENOMEM;
        }
        w->api = api;
        w->req = req;
        w->kind = kind;
        w->next = api->waiters;
        if (api->waiters)
                api->waiters->prev = w;
        api->waiters = w;
        /* Already there, or a final error: answered now, never suspended. */
        if (waiter_check(w, false)) {
                waiter_free(w);
                return 0;
        }
        r = volume_manager_watch_pod(api->m, uid, on_pod_changed, w, &w->watch);
        if (r >= 0)
                r = sd_event_add_time_relative(api->event, &w->timer, CLOCK_MONOTONIC, timeout,
                                               USEC_PER_MSEC, on_timeout, w);
        if (r >= 0)
                r = http_request_suspend(req, on_abandoned, w);
        if (r < 0) {
                waiter_free(w);
                if (r == -EBUSY)
                        return reply_error(req, 503, "too many requests waiting; try again later");
                return r;
        }
        (void) sd_event_source_set_description(w->timer, "api-wait-timeout");
        log_debug("Local API: pod %s: waiting until %s", uid,
                  kind == WAIT_MOUNTED ? "mounted" : "unmounted");
        return 0;
}

/* ---- GET /v1/pods/{uid}/volumes --------------------------------------------------- */

static int serve_pod(HttpRequest *req, void *userdata) {
        static const char *const known[] = { "wait", "timeout", NULL };
        static const char prefix[] = "/v1/pods/";
        LocalApi *api = userdata;
        const char *path = http_request_path(req), *rest, *wait, *timeout_arg, *unknown;
        _cleanup_(pod_view_freep) PodView *v = NULL;
        _cleanup_free_ char *uid = NULL;
        uint64_t timeout = LOCAL_API_DEFAULT_TIMEOUT_USEC;
        WaitKind kind = WAIT_NONE;
        int r;

        rest = path + strlen(prefix);
        const char *slash = strchr(rest, '/');
        if (!slash || !streq(slash, "/volumes"))
                return reply_error(req, 404, "no such path %s; try /v1/pods/{uid}/volumes or /volumes",
                                   path);
        uid = strndup(rest, slash - rest);
        if (!uid)
                return -ENOMEM;
        if (validate_uid(uid) < 0)
                return reply_error(req, 400, "invalid pod UID \"%s\"", uid);
        unknown = http_request_unknown_arg(req, known);
        if (unknown)
                return reply_error(req, 400, "unknown query argument \"%s\"; known: wait, timeout", unknown);
        wait = http_request_arg(req, "wait");
        if (streq_ptr(wait, "mounted"))
                kind = WAIT_MOUNTED;
        else if (streq_ptr(wait, "unmounted"))
                kind = WAIT_UNMOUNTED;
        else if (wait)
                return reply_error(req, 400, "invalid wait \"%s\": mounted or unmounted", wait);
        timeout_arg = http_request_arg(req, "timeout");
        if (timeout_arg) {
                if (kind == WAIT_NONE)
                        return reply_error(req, 400, "timeout is for wait=mounted or wait=unmounted");
                if (config_parse_duration(timeout_arg, &timeout) < 0 || timeout > LOCAL_API_MAX_TIMEOUT_USEC)
                        return reply_error(req, 400,
                                           "invalid timeout \"%s\": a duration (500ms, 30s, 2m) of at "
                                           "most 10m",
                                           timeout_arg);
        }

        if (kind != WAIT_NONE) {
                return start_wait(api, req, uid, kind, timeout);
        }
        r = volume_manager_describe_pod(api->m, uid, &v);
        if (r == -ENOENT)
                return reply_error(req, 404,
                                   "kvolumed knows nothing of pod %s: no such pod bound to this node and "
                                   "nothing of it on the node",
                                   uid);
        if (r < 0)
                return r;
        return reply_json(req, 200, pod_json(uid, v, false));
}

/* ---- GET /volumes with filters ---------------------------------------------------- */

/* The pod volumes' states (kvolumed_volumes{state}, pod_volumes[].state), then
 * the volumes' conditions (kvolumed_volume_conditions). */
static const char *const pod_volume_states[] = { "published", "pending", "failed", "tearing-down", NULL };
static const char *const volume_conditions[] = { "uncertain", "staged", "waiting", "failing", "unresponsive", NULL };

static bool in_list(const char *const *list, const char *s) {
        for (; *list; list++)
                if (streq(*list, s))
                        return true;
        return false;
}

static bool is_set(const cJSON *o, const char *key) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
        return x && !cJSON_IsNull(x) && !cJSON_IsFalse(x);
}

static const char *get_str(const cJSON *o, const char *key) {
        return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* Whether a volume of /volumes has the condition, as kvolumed_volume_conditions counts. */
static bool volume_in_condition(const cJSON *v, const char *condition) {
        if (streq(condition, "uncertain"))
                return is_set(v, "uncertain");
        if (streq(condition, "staged"))
                return streq_ptr(get_str(cJSON_GetObjectItemCaseSensitive(v, "stage"), "state"), "done");
        if (streq(condition, "waiting"))
                return is_set(v, "driver_waiting_since") ||
                       is_set(cJSON_GetObjectItemCaseSensitive(v, "attach"), "waiting_since");
        if (streq(condition, "failing"))
                return is_set(v, "last_error");
        if (streq(condition, "unresponsive"))
                return is_set(v, "unresponsive");
        return false;
}

typedef bool (*keep_t)(cJSON *item, const void *userdata);

static void filter(cJSON *a, keep_t keep, const void *userdata) {
        cJSON *item = a ? a->child : NULL;

        while (item) {
                cJSON *next = item->next;
                if (!keep(item, userdata))
                        cJSON_Delete(cJSON_DetachItemViaPointer(a, item));
                item = next;
        }
}

static bool has_str(const cJSON *item, const char *key, const char *value) {
        return streq_ptr(get_str(item, key), value);
}

static bool keep_of_pod(cJSON *item, const void *pod) {
        return has_str(item, "pod", pod);
}

static bool keep_in_state(cJSON *item, const void *state) {
        return has_str(item, "state", state);
}

/* An entry naming a volume one of the list's entries names (unique_name). */
static bool names_listed(cJSON *item, const void *list) {
        const cJSON *x;
        const char *name = get_str(item, "unique_name");

        cJSON_ArrayForEach(x, (const cJSON *) list) if (name && has_str(x, "unique_name", name)) return true;
        return false;
}

/* A pending entry whose pod volume is in the list. */
static bool pod_volume_listed(cJSON *item, const void *list) {
        const cJSON *x;

        cJSON_ArrayForEach(x, (const cJSON *) list) if (has_str(x, "pod_uid", get_str(item, "pod_uid")) &&
                                                       has_str(x, "volume", get_str(item, "volume"))) return true;
        return false;
}

static bool keep_in_condition(cJSON *item, const void *condition) {
        return volume_in_condition(item, condition);
}

typedef struct PodFilter {
        const char *pod;
        const cJSON *pod_volumes;
} PodFilter;

/* A volume of the pod: one it has a publish of, or one its pod volumes
 * name (a pod whose volume failed before any publish has it too).  Its
 * publishes of other pods are left out. */
static bool keep_volume_of_pod(cJSON *item, const void *userdata) {
        const PodFilter *f = userdata;
        cJSON *pubs = cJSON_GetObjectItemCaseSensitive(item, "publishes"), *p = pubs ? pubs->child : NULL;
        bool keep = names_listed(item, f->pod_volumes);

        while (p) {
                cJSON *pn = p->next;
                if (has_str(p, "pod", f->pod))
                        keep = true;
                else
                        cJSON_Delete(cJSON_DetachItemViaPointer(pubs, p));
                p = pn;
        }
        return keep;
}

/* The old "waiting" of the pending entries: its claim, a report. */
static bool keep_pending_condition(cJSON *item, const void *condition) {
        const char *s = get_str(item, "state");
        return streq(condition, "waiting") && (streq_ptr(s, "waiting") || streq_ptr(s, "reported"));
}

static int serve_volumes(HttpRequest *req, void *userdata) {
        static const char *const known[] = { "pod", "state", NULL };
        VolumeManager *m = userdata;
        const char *pod, *state, *unknown;
        _cleanup_free_ char *text = NULL;
        cJSON *root, *volumes, *pending, *pod_volumes;
        int r;

        unknown = http_request_unknown_arg(req, known);
        if (unknown)
                return reply_error(req, 400, "unknown query argument \"%s\"; known: pod, state", unknown);
        pod = http_request_arg(req, "pod");
        if (pod && (!strchr(pod, '/') || strchr(pod, '/') == pod || strchr(strchr(pod, '/') + 1, '/') ||
                    isempty(strchr(pod, '/') + 1)))
                return reply_error(req, 400, "invalid pod \"%s\": NAMESPACE/NAME", pod);
        state = http_request_arg(req, "state");
        if (state && !in_list(pod_volume_states, state) && !in_list(volume_conditions, state))
                return reply_error(req, 400,
                                   "invalid state \"%s\": one of published, pending, failed, tearing-down (a pod "
                                   "volume's), uncertain, staged, waiting, failing, unresponsive (a volume's)",
                                   state);
        r = volume_manager_describe_json(m, &text);
        if (r < 0)
                return r;
        if (!pod && !state) {
                char *body = NULL;
                if (asprintf(&body, "%s\n", text) < 0)
                        return -ENOMEM;
                return http_request_reply(req, 200, JSON, body, strlen(body));
        }
        root = cJSON_Parse(text);
        if (!root)
                return -ENOMEM;
        volumes = cJSON_GetObjectItemCaseSensitive(root, "volumes");
        pending = cJSON_GetObjectItemCaseSensitive(root, "pending");
        pod_volumes = cJSON_GetObjectItemCaseSensitive(root, "pod_volumes");
        /* The node's counters stay whole: the filters choose the entries.
         * The pod first, from its pod volumes (its desired state), then the
         * volumes they name. */
        if (pod) {
                filter(pod_volumes, keep_of_pod, pod);
                filter(pending, keep_of_pod, pod);
                filter(volumes, keep_volume_of_pod, &(PodFilter){ .pod = pod, .pod_volumes = pod_volumes });
        }
        if (state && in_list(pod_volume_states, state)) {
                filter(pod_volumes, keep_in_state, state);
                filter(volumes, names_listed, pod_volumes);
                filter(pending, pod_volume_listed, pod_volumes);
        } else if (state) {
                filter(volumes, keep_in_condition, state);
                filter(pod_volumes, names_listed, volumes);
                filter(pending, keep_pending_condition, state);
        }
        return reply_json(req, 200, root);
}

int local_api_add_volumes_route(HttpServer *s, VolumeManager *m) {
        return http_server_add_request_route(s, "/volumes", false, serve_volumes, m);
}

static int serve_not_found(HttpRequest *req, void *userdata) {
        return reply_error(req, 404, "no such path %s; try /v1/pods/{uid}/volumes or /volumes",
                           http_request_path(req));
}

/* ---- life cycle ------------------------------------------------------------------- */

int local_api_new(sd_event *event, VolumeManager *m, const char *path, gid_t gid, LocalApi **ret) {
        _cleanup_(local_api_freep) LocalApi *api = NULL;
        int r;

        api = calloc(1, sizeof *api);
        if (!api)
                return -ENOMEM;
        api->event = sd_event_ref(event);
        api->m = m;
        r = http_server_new_unix(event, path, gid, &api->http);
        if (r < 0)
                return r;
        r = http_server_add_request_route(api->http, "/v1/pods/", true, serve_pod, api);
        if (r >= 0)
                r = local_api_add_volumes_route(api->http, m);
        if (r >= 0)
                r = http_server_add_request_route(api->http, "/", true, serve_not_found, api);
        if (r < 0)
                return log_error_errno(r, "Failed to add the local API routes: %m");
        if (gid == (gid_t) -1)
                log_info("Serving the local volumes API on %s (mode 0600, root only)", path);
        else
                log_info("Serving the local volumes API on %s (mode 0660, group %u)", path, (unsigned) gid);
        *ret = TAKE_PTR(api);
        return 0;
}

LocalApi *local_api_free(LocalApi *api) {
        if (!api)
                return NULL;
        /* The server answers its suspended requests (503) and abandons the
         * waiters; any left without a request go here. */
        http_server_free(api->http);
        while (api->waiters)
                waiter_free(api->waiters);
        sd_event_unref(api->event);
        free(api);
        return NULL;
}
