/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <stdlib.h>

#include "csi/cri.h"
#include "k8s/json.h"
#include "systemd/hashmap.h"
#include "volume/internal.h"
#include "volume/runtime.h"

#define GATE_BACKOFF_MIN_USEC (100 * USEC_PER_MSEC)
#define GATE_BACKOFF_MAX_USEC USEC_PER_SEC
/* An answer older than this is asked again: a teardown retried later must
 * not rely on what the runtime said before a container could be restarted. */
#define ANSWER_TTL_USEC USEC_PER_SEC
/* With the event stream up, a waiting pod is asked about again when an event
 * names it; this slow re-check is only the net for an event that never
 * comes: containerd 1.7 drops events when its queue (1000) is full and hands
 * each event to one subscriber only (GetContainerEvents, containerd#7318), so
 * another subscriber on the node takes some.  Kubelet's evented PLEG keeps a
 * 300 s relist for the same reason; a pod that waits costs us more. */
#define SAFETY_NET_USEC (10 * USEC_PER_SEC)
/* Subscribing again after the stream broke. */
#define STREAM_RETRY_MIN_USEC (500 * USEC_PER_MSEC)
#define STREAM_RETRY_MAX_USEC (30 * USEC_PER_SEC)

typedef enum StreamState {
        STREAM_DOWN,     /* broken or not yet open: poll with the backoff, subscribe again later */
        STREAM_UP,       /* events say when to ask again */
        STREAM_UNSERVED, /* the runtime does not serve it: poll with the backoff */
} StreamState;

/* What the last fresh answer said of a pod. */
typedef enum Hold {
        HOLD_NONE,      /* nothing: the pod may go */
        HOLD_CONTAINER, /* a container of it is created, running or unknown */
        HOLD_SANDBOX,   /* no such container, but a sandbox of it is READY: the runner may start one in it */
} Hold;

typedef struct Waiter {
        uint64_t since;      /* when the pod's teardown first asked: answers from rounds started before do not do */
        uint64_t checked_at; /* last check; a waiter no pass asks about any more is dropped */
        Hold hold;           /* what the last fresh answer said */
        unsigned logged;     /* the holds said in the log during this wait, 1 << Hold each */
        bool allowed;        /* the last check said yes: not waiting, kept so that the answer serves
                              * the pod's other volumes and a retry within ANSWER_TTL_USEC */
} Waiter;

struct RuntimeGate {
        sd_event *event;
        CriClient *cri;
        runtime_gate_wake_t wake;
        void *userdata;

        Hashmap *waiters; /* pod UID → Waiter */

        /* The last answer that came. */
        char **running;        /* sorted UIDs of the pods with a container created or running */
        char **ready;          /* sorted UIDs of the pods with a READY sandbox */
        uint64_t answer_asked; /* when its round started; 0: none */
        uint64_t answer_at;    /* when it came */

        uint64_t round_started; /* of the round in flight */
        sd_event_source *timer; /* the next round while pods wait; NULL at rest */
        uint64_t backoff_usec;

        bool unreachable;
        char *reason_unreachable;
        uint64_t errors, rounds;

        /* GetContainerEvents, open for the gate's whole life (see runtime.h). */
        StreamState stream;
        sd_event_source *resubscribe;
        uint64_t stream_backoff_usec;
        bool recheck;       /* an event named a waiting pod after the round in flight started */
        bool said_unserved; /* logged once per process */
        bool said_down;     /* logged once until the stream carries events again */
        uint64_t events;
};

static uint64_t now(RuntimeGate *g) {
        uint64_t t = 0;
        (void) sd_event_now(g->event, CLOCK_MONOTONIC, &t);
        return t;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static bool sorted_contains(char *const *v, const char *uid) {
        size_t n = strv_length(v);
        return n > 0 && bsearch(&uid, v, n, sizeof(char *), cmp_str) != NULL;
}

/* Why the last answer holds the pod, if it does: the runtime may still run it
 * while a container of it is not known to have exited, or while a sandbox of
 * it is READY (a crash-looping container's next attempt, or a first one
 * after an image pull, starts in it). */
static Hold answer_holds(RuntimeGate *g, const char *uid) {
        if (sorted_contains(g->running, uid))
                return HOLD_CONTAINER;
        if (sorted_contains(g->ready, uid))
                return HOLD_SANDBOX;
        return HOLD_NONE;
}

static char **strv_dup(char *const *v) {
        size_t n = strv_length(v);
        char **copy = calloc(n + 1, sizeof(char *));

        for (size_t i = 0; copy && i < n; i++)
                if (!(copy[i] = strdup(v[i])))
                        return strv_free(copy);
        return copy;
}

static void start_round(RuntimeGate *g);
static void subscribe(RuntimeGate *g);

/* Pods no pass asked about since the last answer no longer wait (their
 * volumes went, or the pod is wanted again). */
static void drop_unasked(RuntimeGate *g) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(g->waiters, &i, &key, &value);) {
                Waiter *w = value;
                if (w->checked_at < g->answer_at) {
                        hashmap_remove(g->waiters, key);
                        free(w);
                }
        }
}

static unsigned count_waiting(RuntimeGate *g) {
        unsigned n = 0;
        void *value;

        for (size_t i = 0; hashmap_iterate(g->waiters, &i, NULL, &value);)
                n += !((Waiter *) value)->allowed;
        return n;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        RuntimeGate *g = userdata;

        g->timer = sd_event_source_unref(g->timer);
        drop_unasked(g);
        if (count_waiting(g) == 0) {
                g->backoff_usec = GATE_BACKOFF_MIN_USEC; /* at rest: nothing asks */
                return 0;
        }
        start_round(g);
        return 0;
}

static void arm_timer(RuntimeGate *g) {
        bool net = g->stream == STREAM_UP && !g->unreachable;

        if (g->timer)
                return;
        if (sd_event_add_time_relative(g->event, &g->timer, CLOCK_MONOTONIC, net ? SAFETY_NET_USEC : g->backoff_usec,
                                       10 * USEC_PER_MSEC, on_timer, g) < 0)
                return;
        (void) sd_event_source_set_description(g->timer, net ? "runtime-safety-net" : "runtime-backoff");
        if (!net)
                g->backoff_usec = MIN(g->backoff_usec * 2, GATE_BACKOFF_MAX_USEC);
}

/* The stream went: the pods that waited for their events are polled again,
 * from the shortest backoff, since an event may have been lost with it. */
static void rearm_polling(RuntimeGate *g) {
        if (count_waiting(g) == 0)
                return;
        g->timer = sd_event_source_disable_unref(g->timer);
        g->backoff_usec = GATE_BACKOFF_MIN_USEC;
        if (!cri_client_busy(g->cri))
                arm_timer(g);
}

static void on_answer(CriClient *c, const CriAnswer *a, void *userdata) {
        RuntimeGate *g = userdata;
        bool any_running = false;
        const char *key;

        if (a->code != CSI_CODE_OK) {
                g->errors++;
                if (!g->unreachable) {
                        LogFields f = { .csi_method = a->method, .csi_code = csi_code_name(a->code) };
                        log_fields(LOG_WARNING, &f, "Container runtime %s does not answer (%s: %s: %s); no volume is "
                                   "unpublished until it does", cri_client_endpoint(c), strempty(a->method),
                                   csi_code_name(a->code), strempty(a->message));
                }
                g->unreachable = true;
                free(g->reason_unreachable);
                if (asprintf(&g->reason_unreachable, "the container runtime %s does not answer: %s: %s",
                             cri_client_endpoint(c), csi_code_name(a->code), strempty(a->message)) < 0)
                        g->reason_unreachable = NULL;
                arm_timer(g);
                return;
        }
        if (g->unreachable) {
                log_notice("Container runtime %s answers again; teardowns that waited for it go on",
                           cri_client_endpoint(c));
                /* Restarted, perhaps upgraded: it may serve the events now. */
                if (g->stream == STREAM_UNSERVED)
                        subscribe(g);
        }
        g->unreachable = false;

        _cleanup_(strv_freep) char **running = strv_dup(a->running_uids);
        _cleanup_(strv_freep) char **ready = strv_dup(a->ready_uids);
        if (!running || !ready) {
                /* No answer kept: the waiters keep waiting, and ask again. */
                arm_timer(g);
                return;
        }
        drop_unasked(g);
        strv_free(g->running);
        strv_free(g->ready);
        g->running = TAKE_PTR(running);
        g->ready = TAKE_PTR(ready);
        g->answer_asked = g->round_started;
        g->answer_at = now(g);

        /* Ask again later only for a waiting pod the runtime may still run;
         * the others are decided by the pass this wakes. */
        for (size_t i = 0; hashmap_iterate(g->waiters, &i, &key, NULL);)
                if (answer_holds(g, key) != HOLD_NONE)
                        any_running = true;
        /* Nothing waits: at rest, no timer, no call. */
        if (any_running)
                arm_timer(g);
        else
                g->backoff_usec = GATE_BACKOFF_MIN_USEC;
        g->wake(g->userdata);
        /* An event came while this round ran: it may predate the stop. */
        if (g->recheck)
                start_round(g);
}

static void start_round(RuntimeGate *g) {
        int r;

        if (cri_client_busy(g->cri))
                return;
        g->recheck = false;
        g->round_started = now(g);
        r = cri_client_list_running_pods(g->cri, on_answer, g);
        if (r < 0) {
                log_warning_errno(r, "Failed to ask container runtime %s: %m", cri_client_endpoint(g->cri));
                g->errors++;
                arm_timer(g);
                return;
        }
        g->rounds++;
}

bool runtime_gate_allows(RuntimeGate *g, const char *pod_uid, const LogFields *f) {
        uint64_t t;
        Waiter *w;

        if (!g)
                return true; /* no runtime configured: the API alone decides */
        t = now(g);
        w = hashmap_get(g->waiters, pod_uid);
        if (!w) {
                w = calloc(1, sizeof *w);
                if (!w || hashmap_put(g->waiters, pod_uid, w, NULL) < 0) {
                        free(w);
                        return false;
                }
                w->since = t;
        }
        w->checked_at = t;

        bool fresh = g->answer_asked >= w->since && g->answer_at + ANSWER_TTL_USEC > t && !g->unreachable;
        Hold hold = fresh ? answer_holds(g, pod_uid) : HOLD_NONE;
        if (fresh && hold == HOLD_NONE) {
                if (w->logged != 0)
                        log_fields(LOG_INFO, f, "Container runtime %s says no container of pod %s runs any more and "
                                   "no sandbox of it is READY; tearing down its volume %s",
                                   cri_client_endpoint(g->cri), strempty(f->pod ?: pod_uid), strempty(f->volume));
                w->logged = 0;
                w->hold = HOLD_NONE;
                w->allowed = true;
                return true;
        }
        w->allowed = false;
        if (fresh) {
                w->hold = hold;
                /* Each reason said once per wait (a crash-looping pod flips
                 * between the two with every attempt): what the operator must
                 * look at differs, a container to stop or a sandbox. */
                if (!(w->logged & (1u << hold))) {
                        if (hold == HOLD_CONTAINER)
                                log_fields(LOG_NOTICE, f, "Not unpublishing volume %s of pod %s: container runtime %s "
                                           "says a container of the pod is still created or running",
                                           strempty(f->volume), strempty(f->pod ?: pod_uid),
                                           cri_client_endpoint(g->cri));
                        else
                                log_fields(LOG_NOTICE, f, "Not unpublishing volume %s of pod %s: container runtime %s "
                                           "says a sandbox of the pod is still READY, and a container may be "
                                           "started in it again; the volume is torn down once the pod's runner "
                                           "stops the sandbox (StopPodSandbox, as kubelet does when it kills a pod)",
                                           strempty(f->volume), strempty(f->pod ?: pod_uid),
                                           cri_client_endpoint(g->cri));
                }
                w->logged |= 1u << hold;
                /* The timer asks again; on_answer() armed it. */
                if (!g->timer && !cri_client_busy(g->cri))
                        arm_timer(g);
                return false;
        }
        /* No answer from a round started since the pod waits, or too old. */
        /* Unreachable: the timer's backoff paces the rounds, not the passes. */
        if (!g->unreachable)
                start_round(g);
        else if (!g->timer && !cri_client_busy(g->cri))
                arm_timer(g);
        return false;
}

const char *runtime_gate_reason(RuntimeGate *g, const char *pod_uid) {
        Waiter *w = g ? hashmap_get(g->waiters, pod_uid) : NULL;

        if (!w || w->allowed)
                return NULL;
        if (g->unreachable)
                return g->reason_unreachable ?: "the container runtime does not answer";
        if (w->hold == HOLD_CONTAINER)
                return "a container of the pod is still created or running in the container runtime";
        if (w->hold == HOLD_SANDBOX)
                return "a sandbox of the pod is still READY in the container runtime: its runner must stop it "
                       "(StopPodSandbox)";
        return "asking the container runtime whether it may still run a container of the pod";
}

void runtime_gate_get_stats(RuntimeGate *g, RuntimeGateStats *ret) {
        *ret = (RuntimeGateStats){};
        if (!g)
                return;
        *ret = (RuntimeGateStats){ .configured = true,
                                   .unreachable = g->unreachable,
                                   .errors = g->errors,
                                   .rounds = g->rounds,
                                   .waiting = count_waiting(g) };
}

static bool waits_for_runtime(RuntimeGate *g, const char *pod_uid) {
        Waiter *w;

        if (!pod_uid)
                return count_waiting(g) > 0; /* which pod, the runtime did not say */
        w = hashmap_get(g->waiters, pod_uid);
        return w && !w->allowed;
}

static void on_event(CriClient *c, const CriEvent *e, void *userdata) {
        RuntimeGate *g = userdata;

        g->events++;
        g->said_down = false;
        g->stream_backoff_usec = STREAM_RETRY_MIN_USEC; /* it works: a later break retries soon */
        /* A container created or started frees nothing; a stop or a removal
         * (of a container or of the sandbox itself) may free its pod.  A
         * sandbox's stop is a CONTAINER_STOPPED_EVENT naming the sandbox as
         * the container, sent once it is NOTREADY (containerd's
         * handleSandboxExit, CRI-O's StopPodSandbox). */
        if (e->type == CRI_EVENT_CONTAINER_CREATED || e->type == CRI_EVENT_CONTAINER_STARTED)
                return;
        if (!waits_for_runtime(g, e->pod_uid))
                return;
        LogFields f = { .pod_uid = e->pod_uid, .csi_method = "GetContainerEvents" };
        log_fields(LOG_DEBUG, &f, "Container runtime %s: a container or sandbox of waiting pod %s stopped or went; "
                   "asking again",
                   cri_client_endpoint(c), strempty(e->pod_uid));
        /* The answer itself comes from a round: an event says when, the lists say what. */
        if (cri_client_busy(g->cri))
                g->recheck = true;
        else
                start_round(g);
}

static int on_resubscribe(sd_event_source *s, uint64_t usec, void *userdata) {
        RuntimeGate *g = userdata;

        g->resubscribe = sd_event_source_disable_unref(g->resubscribe);
        subscribe(g);
        return 0;
}

static void stream_down(RuntimeGate *g, const char *why) {
        uint64_t delay = g->stream_backoff_usec;

        g->stream = STREAM_DOWN;
        if (!g->said_down) {
                LogFields f = { .csi_method = "GetContainerEvents" };
                log_fields(LOG_NOTICE, &f, "The event stream of container runtime %s is down (%s); pods waiting for "
                           "teardown are asked about with a backoff, subscribing again in %" PRIu64 " ms",
                           cri_client_endpoint(g->cri), why, delay / USEC_PER_MSEC);
        }
        g->said_down = true;
        rearm_polling(g);
        if (g->resubscribe)
                return;
        g->stream_backoff_usec = MIN(g->stream_backoff_usec * 2, STREAM_RETRY_MAX_USEC);
        if (sd_event_add_time_relative(g->event, &g->resubscribe, CLOCK_MONOTONIC, delay, 10 * USEC_PER_MSEC,
                                       on_resubscribe, g) >= 0)
                (void) sd_event_source_set_description(g->resubscribe, "runtime-resubscribe");
}

static void on_stream_end(CriClient *c, CsiCode code, const char *message, uint64_t n_events, void *userdata) {
        RuntimeGate *g = userdata;
        _cleanup_free_ char *why = NULL;

        /* A runtime that does not serve the stream (containerd 1.6) says so;
         * CRI-O without enable_pod_events closes it at once without a word. */
        if (code == CSI_CODE_UNIMPLEMENTED || (code == CSI_CODE_OK && n_events == 0)) {
                g->stream = STREAM_UNSERVED;
                if (!g->said_unserved)
                        log_info("Container runtime %s does not serve GetContainerEvents (%s); a pod waiting for "
                                 "teardown is asked about again with a backoff of 100 ms to 1 s",
                                 cri_client_endpoint(c),
                                 code == CSI_CODE_OK ? "it closes the stream at once" : "UNIMPLEMENTED");
                g->said_unserved = true;
                rearm_polling(g);
                return;
        }
        if (asprintf(&why, "%s: %s", csi_code_name(code), strempty(message)) < 0)
                why = NULL;
        stream_down(g, why ?: csi_code_name(code));
}

static void subscribe(RuntimeGate *g) {
        int r;

        if (cri_client_subscribed(g->cri))
                return;
        r = cri_client_subscribe(g->cri, on_event, on_stream_end, g);
        if (r < 0) {
                errno = -r;
                stream_down(g, strerror(-r));
                return;
        }
        /* Up from here: the runtime sends nothing, not even headers, before
         * its first event, so there is no later moment to wait for. */
        g->stream = STREAM_UP;
}

void volume_manager_get_runtime_stats(VolumeManager *m, VolumeRuntimeStats *ret) {
        RuntimeGateStats s;

        runtime_gate_get_stats(m->runtime, &s);
        *ret = (VolumeRuntimeStats){ .configured = s.configured,
                                     .unreachable = s.unreachable,
                                     .errors = s.errors,
                                     .rounds = s.rounds,
                                     .waiting = s.waiting };
}

int runtime_gate_new(sd_event *event, const char *endpoint, runtime_gate_wake_t wake, void *userdata,
                     RuntimeGate **ret) {
        _cleanup_(runtime_gate_freep) RuntimeGate *g = NULL;
        int r;

        *ret = NULL;
        if (isempty(endpoint)) {
                log_warning("[runtime] endpoint is empty: volumes are unpublished on the API's word alone; a pod "
                            "force-deleted while its containers run loses its volumes under them");
                return 0;
        }
        g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->event = sd_event_ref(event);
        g->wake = wake;
        g->userdata = userdata;
        g->backoff_usec = GATE_BACKOFF_MIN_USEC;
        g->stream_backoff_usec = STREAM_RETRY_MIN_USEC;
        g->waiters = hashmap_new();
        if (!g->waiters)
                return -ENOMEM;
        r = cri_client_new(event, endpoint, CRI_DEFAULT_TIMEOUT_USEC, &g->cri);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the CRI client for %s: %m", endpoint);
        log_info("Asking container runtime %s before any volume is unpublished", endpoint);
        subscribe(g);
        *ret = TAKE_PTR(g);
        return 0;
}

RuntimeGate *runtime_gate_free(RuntimeGate *g) {
        void *value;

        if (!g)
                return NULL;
        cri_client_free(g->cri);
        sd_event_source_disable_unref(g->timer);
        sd_event_source_disable_unref(g->resubscribe);
        for (size_t i = 0; hashmap_iterate(g->waiters, &i, NULL, &value);)
                free(value);
        hashmap_free(g->waiters);
        strv_free(g->running);
        strv_free(g->ready);
        free(g->reason_unreachable);
        sd_event_unref(g->event);
        free(g);
        return NULL;
}
