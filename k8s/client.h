/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The connection to the API server: one libcurl multi handle on sd-event
 * (HTTP/2 multiplexed where the server offers it), TLS always verified
 * unless the kubeconfig says insecure-skip-tls-verify, a bearer token re-read
 * when its file changes, a client-side token-bucket rate limit shared by
 * every request, watches included (kubelet's defaults: 50 QPS, burst 100),
 * and a backoff of the host as a whole once the server stops answering
 * (k8s/ratelimit.h: one connection attempt at a time, 200 ms doubling to
 * 5 s apart), so that a dead server is not knocked on faster whatever the
 * number of requesters.  Requests held back wait in one FIFO queue. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "k8s/auth.h"
#include "systemd/macro.h"

typedef struct K8sClient K8sClient;
typedef struct K8sRequest K8sRequest;

#define K8S_DEFAULT_QPS 50.0
#define K8S_DEFAULT_BURST 100u

typedef struct K8sClientOptions {
        double qps;             /* 0: K8S_DEFAULT_QPS */
        unsigned burst;         /* 0: K8S_DEFAULT_BURST */
        const char *user_agent; /* NULL: "kvolumed/<version>" */
        uint64_t request_timeout_usec; /* 0: 60 s, for everything but watches */
        /* No "unreachable"/"answers again" lines: a one-shot client (the
         * online check) reports its one answer itself. */
        bool quiet_reachability;
} K8sClientOptions;

typedef struct K8sResponse {
        int error;        /* 0 when an HTTP answer came, else -errno of the transport failure */
        long status;      /* HTTP status; 0 when none */
        const char *body; /* buffered body (NUL-terminated), "" for a streamed watch */
        size_t size;
        uint64_t retry_after_usec; /* from a Retry-After header; 0 when none */
        /* Why it failed, for a log line: names the server and says what went
         * wrong (TLS, 401, the Status message, ...); NULL on success. */
        const char *message;
} K8sResponse;

/* Called once when a request ends (not when it was cancelled).  The request
 * is freed after the callback returns. */
typedef void (*k8s_response_t)(K8sClient *c, const K8sResponse *r, void *userdata);
/* Streamed body bytes of a watch answered 200; return <0 to abort it (the
 * response callback then reports -ECANCELED). */
typedef int (*k8s_data_t)(K8sClient *c, const char *data, size_t size, void *userdata);

/* Takes ownership of auth, also on failure. */
int k8s_client_new(sd_event *event, K8sAuth *auth, const K8sClientOptions *options, K8sClient **ret);
K8sClient *k8s_client_free(K8sClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sClient *, k8s_client_free);

sd_event *k8s_client_event(K8sClient *c);
const char *k8s_client_server(K8sClient *c);

/* A request to "path" (starting with '/', query included), queued behind the
 * rate limit.  While a Retry-After the API server gave for the path (with a
 * 429 or 503) has not passed, the request is not sent: it is answered 429
 * with the time left in retry_after_usec.  body may be NULL.  *ret (optional) lets the caller cancel it. */
int k8s_client_request(K8sClient *c, const char *method, const char *path, const char *content_type,
                       const char *body, k8s_response_t done, void *userdata, K8sRequest **ret);

/* A watch: queued as a request is, body streamed to on_data while the answer is
 * 200; other answers are buffered and given to done. */
int k8s_client_watch(K8sClient *c, const char *path, uint64_t timeout_usec, k8s_data_t on_data, k8s_response_t done,
                     void *userdata, K8sRequest **ret);

/* Stops a request; its callback is not called.  NULL is fine; calling it on
 * the request whose callback is running does nothing. */
void k8s_request_cancel(K8sRequest *r);

/* Called with the request's userdata when it is cancelled (also by
 * k8s_client_free), so that a multi-step operation can free its state. */
void k8s_request_set_destroy(K8sRequest *r, void (*destroy)(void *userdata));

/* Requests queued behind the rate limit, and running. */
unsigned k8s_client_queued(K8sClient *c);
unsigned k8s_client_running(K8sClient *c);

/* ---- request metrics ------------------------------------------------------ */

/* One request that reached the network, for client-go's rest_client_*
 * metrics: counted once per request as client-go's updateURLMetrics does
 * (status 0: a transport error, client-go's code "<error>"); a watch when
 * its answer starts (or when it fails before that), with no duration, as
 * client-go observes latency only for requests that are read whole.  A
 * request answered locally from a Retry-After hold never left: not counted. */
typedef struct K8sRequestMetrics {
        const char *method;     /* "GET", "PATCH", ... */
        const char *host;       /* the server's host[:port], client-go's label */
        long status;            /* HTTP status, 0 on a transport error */
        bool watch;
        uint64_t duration_usec; /* from start to the whole answer; 0 for a watch */
} K8sRequestMetrics;

typedef void (*k8s_request_hook_t)(const K8sRequestMetrics *m, void *userdata);
/* NULL turns it off. */
void k8s_client_set_request_hook(K8sClient *c, k8s_request_hook_t hook, void *userdata);

/* ---- reachability ------------------------------------------------------- */

/* Whether the API server answers at all: a request that got no HTTP answer
 * (connection refused, DNS, TLS, timeout) makes it unreachable, any HTTP
 * answer reachable again.  The client logs each change once (the first with
 * what to check), so that the requests failing meanwhile, each retried with
 * its own backoff, need not: they log at debug level.  Returns the
 * CLOCK_MONOTONIC time since which it is unreachable, 0 when it answers;
 * *ret_error (optional) the last failure's message. */
uint64_t k8s_client_unreachable_since(K8sClient *c, const char **ret_error);

/* Whether a response is a failure to reach the server (no HTTP answer), that
 * k8s_client_unreachable_since() accounts for: its owner logs it at debug. */
static inline bool k8s_response_unreachable(const K8sResponse *r) {
        return r->error < 0 && r->error != -ECANCELED && r->status == 0;
}

/* Percent-encodes s for a query value or path segment. */
char *k8s_escape(const char *s);

/* Status body → its "message" (malloc'd) or NULL. */
char *k8s_status_message(const char *body, size_t size);
