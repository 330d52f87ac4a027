/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A token bucket on an explicit clock (µs), as client-go's flowcontrol
 * limiter: "rate" tokens per second, at most "burst" saved up.  Pure, so the
 * tests drive it with a fake clock. */

#include <stdbool.h>
#include <stdint.h>

typedef struct K8sTokenBucket {
        double tokens;
        double rate;  /* tokens per second */
        double burst; /* capacity */
        uint64_t last_usec;
} K8sTokenBucket;

/* Starts full, as client-go's does. */
void k8s_token_bucket_init(K8sTokenBucket *b, double rate, double burst, uint64_t now_usec);
/* Takes one token if there is one. */
bool k8s_token_bucket_take(K8sTokenBucket *b, uint64_t now_usec);
/* µs until a token is available (0: now). */
uint64_t k8s_token_bucket_wait_usec(K8sTokenBucket *b, uint64_t now_usec);

/* The API server's host as a whole, after connection failures: client-go's
 * per-host URLBackoff, made a circuit breaker.  While the server answers,
 * requests start as the token bucket lets them.  Once a request got no HTTP
 * answer at all (refused, reset, TLS failed, timed out before any answer),
 * nothing starts before the backoff passes, and then ONE request (the probe)
 * goes alone: every other request waits in the client's queue until the
 * probe gets an answer (any HTTP status: the server is back) or fails (the
 * backoff doubles).  So a dead server sees at most one connection attempt
 * per backoff step, 200 ms doubling to 5 s, whatever the number of requests
 * waiting: 10 attempts in the first 30 s of an outage, then 1 every 5 s.
 * Requests started before the last change of state say nothing: their
 * failures (all those on the wire when the server went) count once, not
 * once each, and their answers may predate the failure (read late by a
 * loaded loop), so only the probe's answer ends the backoff. */
#define K8S_HOST_BACKOFF_BASE_USEC (200u * 1000u)
#define K8S_HOST_BACKOFF_MAX_USEC (5u * 1000u * 1000u)

typedef struct K8sHostBackoff {
        unsigned failures;  /* consecutive, counted once per epoch */
        unsigned epoch;     /* bumped on every change of state */
        bool probing;       /* the one request let through is on its way */
        uint64_t not_before_usec;
        uint64_t base_usec, max_usec;
} K8sHostBackoff;

void k8s_host_backoff_init(K8sHostBackoff *b, uint64_t base_usec, uint64_t max_usec);
/* µs until a request may start: 0 now, UINT64_MAX when it must wait for the
 * probe's end. */
uint64_t k8s_host_backoff_wait_usec(const K8sHostBackoff *b, uint64_t now_usec);
/* A request starts: *ret_epoch is what to give k8s_host_backoff_end(); true
 * when it is the probe. */
bool k8s_host_backoff_begin(K8sHostBackoff *b, unsigned *ret_epoch);
/* A request ended: answered (any HTTP status) or not.  Returns true when the
 * host's state changed (down, or up again), for the caller's log line and to
 * start what waited. */
bool k8s_host_backoff_end(K8sHostBackoff *b, unsigned epoch, bool probe, bool answered, uint64_t now_usec);
/* The probe was cancelled by its owner: another request may probe. */
void k8s_host_backoff_abandon(K8sHostBackoff *b, bool probe);
/* Whether the host is taken for down now. */
static inline bool k8s_host_backoff_down(const K8sHostBackoff *b) {
        return b->failures > 0;
}
