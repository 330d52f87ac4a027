/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <stdlib.h>

#include "csi/cri.h"
#include "csi/cri.pb-c.h"
#include "csi/grpc.h"
#include "systemd/log.h"
#include "systemd/validate.h"

#define CRI_LIST_CONTAINERS "/runtime.v1.RuntimeService/ListContainers"
#define CRI_LIST_SANDBOXES "/runtime.v1.RuntimeService/ListPodSandbox"
#define CRI_GET_EVENTS "/runtime.v1.RuntimeService/GetContainerEvents"
/* kubelet's label on every container it creates; another runner may not set it. */
#define CRI_POD_UID_LABEL "io.kubernetes.pod.uid"
/* A node with thousands of exited containers answers large lists. */
#define CRI_MAX_RECEIVE (16u * 1024u * 1024u)
/* A list of a few hundred containers in one read (see grpc.c). */
#define CRI_RECEIVE_BUFFER (512u * 1024u)

struct CriClient {
        GrpcTransport *transport;
        GrpcChannel *channel;
        char *endpoint;
        uint64_t timeout_usec;

        /* The round in flight. */
        GrpcCall *call;
        uint8_t *containers; /* the first answer, kept for the second */
        size_t containers_size;
        cri_answer_t done;
        void *userdata;

        /* The event stream. */
        GrpcCall *stream;
        uint64_t n_events;
        cri_event_t on_event;
        cri_events_end_t on_end;
        void *events_userdata;
};

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The pod UID labels of a container and of a sandbox; a runner other than
 * kubelet may set none. */
static const char *container_label(const Runtime__V1__Container *ct, const char *key) {
        for (size_t i = 0; i < ct->n_labels; i++)
                if (ct->labels[i]->key && streq(ct->labels[i]->key, key))
                        return ct->labels[i]->value;
        return NULL;
}

static const char *sandbox_label(const Runtime__V1__PodSandbox *sb, const char *key) {
        for (size_t i = 0; i < sb->n_labels; i++)
                if (sb->labels[i]->key && streq(sb->labels[i]->key, key))
                        return sb->labels[i]->value;
        return NULL;
}

static const char *sandbox_uid(const Runtime__V1__PodSandbox *sb) {
        if (sb->metadata && !isempty(sb->metadata->uid))
                return sb->metadata->uid;
        return sandbox_label(sb, CRI_POD_UID_LABEL);
}

/* Sorts v[0..n) and frees the duplicates: a pod has several containers, and
 * may have several sandboxes (attempts). */
static void sort_distinct(char **v, size_t n) {
        size_t k = 0;

        qsort(v, n, sizeof *v, cmp_str);
        for (size_t i = 0; i < n; i++) {
                char *u = TAKE_PTR(v[i]);
                if (k > 0 && streq(v[k - 1], u))
                        free(u);
                else
                        v[k++] = u;
        }
}

static int push(char **v, size_t *n, const char *uid) {
        v[*n] = strdup(uid);
        if (!v[*n])
                return -ENOMEM;
        (*n)++;
        return 0;
}

int cri_running_pods(const uint8_t *containers, size_t containers_size, const uint8_t *sandboxes,
                     size_t sandboxes_size, char ***ret_running, char ***ret_ready) {
        Runtime__V1__ListContainersResponse *cl = NULL;
        Runtime__V1__ListPodSandboxResponse *sl = NULL;
        char **running = NULL, **ready = NULL;
        size_t n = 0, m = 0;
        int r = 0;

        cl = runtime__v1__list_containers_response__unpack(NULL, containers_size, containers);
        sl = cl ? runtime__v1__list_pod_sandbox_response__unpack(NULL, sandboxes_size, sandboxes) : NULL;
        if (!cl || !sl) {
                r = -EBADMSG;
                goto finish;
        }
        running = calloc(cl->n_containers + 1, sizeof *running);
        ready = calloc(sl->n_items + 1, sizeof *ready);
        if (!running || !ready) {
                r = -ENOMEM;
                goto finish;
        }
        for (size_t i = 0; i < cl->n_containers; i++) {
                const Runtime__V1__Container *ct = cl->containers[i];
                const char *uid = NULL;

                /* Only an exit is an answer: a container being created will run,
                 * and one in an unknown state may. */
                if (ct->state == RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED)
                        continue;
                for (size_t j = 0; j < sl->n_items && !uid; j++) {
                        const Runtime__V1__PodSandbox *sb = sl->items[j];
                        if (sb->id && ct->pod_sandbox_id && streq(sb->id, ct->pod_sandbox_id))
                                uid = sandbox_uid(sb);
                }
                /* The sandbox went between the two calls, or never named its pod. */
                if (isempty(uid))
                        uid = container_label(ct, CRI_POD_UID_LABEL);
                if (isempty(uid))
                        continue;
                r = push(running, &n, uid);
                if (r < 0)
                        goto finish;
        }
        for (size_t j = 0; j < sl->n_items; j++) {
                const Runtime__V1__PodSandbox *sb = sl->items[j];
                const char *uid;

                /* Only a stopped sandbox is an answer.  In a READY one the
                 * runner may start the next attempt of an exited container
                 * (CrashLoopBackOff) or the first one once its image is
                 * pulled: kubelet stops the sandbox (killPod) before it tears
                 * the pod's volumes down.  READY is the field's zero value, so a
                 * sandbox that does not say is READY, and so is a state this
                 * client does not know. */
                if (sb->state == RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY)
                        continue;
                uid = sandbox_uid(sb);
                if (isempty(uid))
                        continue;
                r = push(ready, &m, uid);
                if (r < 0)
                        goto finish;
        }
        sort_distinct(running, n);
        sort_distinct(ready, m);
        *ret_running = TAKE_PTR(running);
        *ret_ready = TAKE_PTR(ready);
finish:
        strv_free(running);
        strv_free(ready);
        if (cl)
                runtime__v1__list_containers_response__free_unpacked(cl, NULL);
        if (sl)
                runtime__v1__list_pod_sandbox_response__free_unpacked(sl, NULL);
        return r;
}

int cri_client_new(sd_event *event, const char *endpoint, uint64_t timeout_usec, CriClient **ret) {
        _cleanup_(cri_client_freep) CriClient *c = NULL;
        const char *path;
        int r;

        r = unix_endpoint_path(endpoint, &path);
        if (r < 0)
                return r;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->timeout_usec = timeout_usec ?: CRI_DEFAULT_TIMEOUT_USEC;
        c->endpoint = strdup(endpoint);
        if (!c->endpoint)
                return -ENOMEM;
        /* Its own transport: a runtime is not a CSI driver, and its calls
         * must never queue behind a driver's. */
        r = grpc_transport_new(event,
                               &(GrpcTransportOptions){ .max_receive_bytes = CRI_MAX_RECEIVE,
                                                        .receive_buffer_bytes = CRI_RECEIVE_BUFFER },
                               &c->transport);
        if (r < 0)
                return r;
        r = grpc_channel_new(c->transport, path, 2, &c->channel);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

CriClient *cri_client_free(CriClient *c) {
        if (!c)
                return NULL;
        if (c->call)
                grpc_call_cancel(c->call);
        cri_client_unsubscribe(c);
        free(c->containers);
        grpc_channel_unref(c->channel);
        grpc_transport_free(c->transport);
        free(c->endpoint);
        free(c);
        return NULL;
}

const char *cri_client_endpoint(CriClient *c) {
        return c->endpoint;
}

bool cri_client_busy(CriClient *c) {
        return c->done != NULL;
}

static void finish_round(CriClient *c, const CriAnswer *a) {
        cri_answer_t done = c->done;
        void *userdata = c->userdata;

        c->call = NULL;
        c->done = NULL;
        c->userdata = NULL;
        free(c->containers);
        c->containers = NULL;
        c->containers_size = 0;
        done(c, a, userdata);
}

static void fail_round(CriClient *c, const char *method, CsiCode code, const char *message) {
        LogFields f = { .csi_method = method, .csi_code = csi_code_name(code) };
        log_fields(LOG_DEBUG, &f, "%s on container runtime %s: %s: %s", method, c->endpoint, csi_code_name(code),
                   message);
        finish_round(c, &(CriAnswer){ .code = code, .message = message, .method = method });
}

static size_t strv_count(char *const *v) {
        size_t n = 0;
        while (v[n])
                n++;
        return n;
}

static void on_sandboxes(GrpcCall *call, const GrpcResult *r, void *userdata) {
        CriClient *c = userdata;
        char **running = NULL, **ready = NULL;
        int k;

        c->call = NULL;
        if (r->code != CSI_CODE_OK)
                return fail_round(c, "ListPodSandbox", r->code, r->message);
        k = cri_running_pods(c->containers, c->containers_size, r->data, r->size, &running, &ready);
        if (k < 0)
                return fail_round(c, "ListPodSandbox", CSI_CODE_INTERNAL,
                                  k == -ENOMEM ? "out of memory" : "error unmarshalling the runtime's answer");
        LogFields f = { .csi_method = "ListPodSandbox", .csi_code = "OK" };
        log_fields(LOG_DEBUG, &f, "Container runtime %s: %zu pods have a container created or running, %zu a sandbox "
                   "READY", c->endpoint, strv_count(running), strv_count(ready));
        finish_round(c, &(CriAnswer){ .code = CSI_CODE_OK, .message = "", .running_uids = running,
                                      .ready_uids = ready });
        strv_free(running);
        strv_free(ready);
}

static int call(CriClient *c, const char *path, const ProtobufCMessage *req, grpc_call_done_t done) {
        uint8_t buf[64];
        size_t size = protobuf_c_message_get_packed_size(req);

        if (size > sizeof buf)
                return -EINVAL;
        (void) protobuf_c_message_pack(req, buf);
        return grpc_channel_call(c->channel, path, buf, size, c->timeout_usec, done, c, &c->call);
}

static void on_containers(GrpcCall *g, const GrpcResult *r, void *userdata) {
        CriClient *c = userdata;
        Runtime__V1__ListPodSandboxRequest req = RUNTIME__V1__LIST_POD_SANDBOX_REQUEST__INIT;
        int k;

        c->call = NULL;
        if (r->code != CSI_CODE_OK)
                return fail_round(c, "ListContainers", r->code, r->message);
        c->containers = malloc(MAX(r->size, (size_t) 1));
        if (!c->containers)
                return fail_round(c, "ListContainers", CSI_CODE_RESOURCE_EXHAUSTED, "out of memory");
        memcpy(c->containers, r->data, r->size);
        c->containers_size = r->size;
        /* Sandboxes second: every container listed had its sandbox created
         * before it, so the sandbox list cannot miss one that still exists;
         * and a container started after the first list is in a sandbox the
         * second finds READY, or was stopped with it (StopPodSandbox stops
         * every container of the sandbox before the sandbox). */
        k = call(c, CRI_LIST_SANDBOXES, &req.base, on_sandboxes);
        if (k < 0)
                fail_round(c, "ListPodSandbox", CSI_CODE_INTERNAL, strerror(-k));
}

int cri_client_list_running_pods(CriClient *c, cri_answer_t done, void *userdata) {
        /* No filter: one round answers for every pod, however many wait. */
        Runtime__V1__ListContainersRequest req = RUNTIME__V1__LIST_CONTAINERS_REQUEST__INIT;
        int r;

        if (c->done)
                return -EBUSY;
        r = call(c, CRI_LIST_CONTAINERS, &req.base, on_containers);
        if (r < 0)
                return r;
        c->done = done;
        c->userdata = userdata;
        return 0;
}

int cri_event_decode(const uint8_t *data, size_t size, CriEvent *ret, void **ret_owner) {
        Runtime__V1__ContainerEventResponse *e;
        const Runtime__V1__PodSandboxStatus *sb;

        e = runtime__v1__container_event_response__unpack(NULL, size, data);
        if (!e)
                return -EBADMSG;
        sb = e->pod_sandbox_status;
        *ret = (CriEvent){
                .type = (CriEventType) e->container_event_type,
                .container_id = e->container_id,
                .sandbox_id = sb && !isempty(sb->id) ? sb->id : NULL,
                .pod_uid = sb && sb->metadata && !isempty(sb->metadata->uid) ? sb->metadata->uid : NULL,
                .created_at_nsec = e->created_at,
        };
        *ret_owner = e;
        return 0;
}

void cri_event_owner_free(void *owner) {
        if (owner)
                runtime__v1__container_event_response__free_unpacked(owner, NULL);
}

static const char *event_type_name(CriEventType t) {
        static const char *const names[] = { "CONTAINER_CREATED_EVENT", "CONTAINER_STARTED_EVENT",
                                             "CONTAINER_STOPPED_EVENT", "CONTAINER_DELETED_EVENT" };
        return (unsigned) t < ELEMENTSOF(names) ? names[t] : "unknown event";
}

static void on_event_message(GrpcCall *g, const uint8_t *data, size_t size, void *userdata) {
        CriClient *c = userdata;
        void *owner = NULL;
        CriEvent e;

        if (cri_event_decode(data, size, &e, &owner) < 0) {
                /* It may have been the stop a pod waits for: the owner asks again. */
                log_warning("Container runtime %s sent an event that does not decode (%zu bytes)", c->endpoint,
                            size);
                c->on_event(c, &(CriEvent){ .type = CRI_EVENT_UNDECODABLE }, c->events_userdata);
                return;
        }
        c->n_events++;
        LogFields f = { .pod_uid = e.pod_uid, .csi_method = "GetContainerEvents" };
        log_fields(LOG_DEBUG, &f, "Container runtime %s: %s for %s %s of pod %s", c->endpoint,
                   event_type_name(e.type), e.sandbox_id && streq(e.container_id, e.sandbox_id) ? "sandbox" : "container",
                   strempty(e.container_id), strempty(e.pod_uid));
        c->on_event(c, &e, c->events_userdata);
        cri_event_owner_free(owner);
}

static void on_events_end(GrpcCall *g, const GrpcResult *r, void *userdata) {
        CriClient *c = userdata;
        uint64_t n = c->n_events;

        c->stream = NULL;
        LogFields f = { .csi_method = "GetContainerEvents", .csi_code = csi_code_name(r->code) };
        log_fields(LOG_DEBUG, &f, "Event stream of container runtime %s ended after %" PRIu64 " events: %s: %s",
                   c->endpoint, n, csi_code_name(r->code), r->message);
        c->on_end(c, r->code, r->message, n, c->events_userdata);
}

int cri_client_subscribe(CriClient *c, cri_event_t on_event, cri_events_end_t on_end, void *userdata) {
        Runtime__V1__GetEventsRequest req = RUNTIME__V1__GET_EVENTS_REQUEST__INIT;
        uint8_t buf[16];
        size_t size = protobuf_c_message_get_packed_size(&req.base);
        int r;

        if (!on_event || !on_end)
                return -EINVAL;
        if (c->stream)
                return -EBUSY;
        if (size > sizeof buf)
                return -EINVAL;
        (void) protobuf_c_message_pack(&req.base, buf);
        c->on_event = on_event;
        c->on_end = on_end;
        c->events_userdata = userdata;
        c->n_events = 0;
        r = grpc_channel_stream(c->channel, CRI_GET_EVENTS, buf, size, on_event_message, on_events_end, c, &c->stream);
        if (r < 0)
                return r;
        LogFields f = { .csi_method = "GetContainerEvents" };
        log_fields(LOG_DEBUG, &f, "Subscribed to the events of container runtime %s", c->endpoint);
        return 0;
}

void cri_client_unsubscribe(CriClient *c) {
        if (!c->stream)
                return;
        grpc_call_cancel(c->stream);
        c->stream = NULL;
}

bool cri_client_subscribed(CriClient *c) {
        return c->stream != NULL;
}
