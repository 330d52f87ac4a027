/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Whether the API server answers, as the operator is told it: one line
 * when it stops, one when it answers again.  The state follows the order
 * of events, not the order a loaded loop handles them in: each request
 * takes the epoch at its start, every change of state bumps it, and a
 * request from before the last change says nothing new.  Its answer may
 * have come before the server went (read after a neighbour's failure, in
 * the same turn of the loop); its failure is one of those the change
 * already told of.  Without this, one outage was two warnings, with an
 * "answers again" between (two pages for an operator alerting on them). */

#include <stdbool.h>
#include <stdint.h>

typedef struct K8sReachability {
        uint64_t unreachable_since; /* CLOCK_MONOTONIC µs; 0: the last news was an answer */
        char *error;                /* the last failure's message, while unreachable */
        unsigned failures;          /* requests failed while unreachable */
        unsigned epoch;             /* bumped on every change of state */
} K8sReachability;

typedef enum K8sReachabilityChange {
        K8S_REACHABILITY_SAME,
        K8S_REACHABILITY_DOWN, /* the first failure: warn */
        K8S_REACHABILITY_BACK, /* the first answer since: say so */
} K8sReachabilityChange;

/* A request starts: what to give the two below when it ends. */
static inline unsigned k8s_reachability_begin(const K8sReachability *s) {
        return s->epoch;
}

/* The request started at epoch got an HTTP answer.  On BACK, *ret_down_usec
 * and *ret_failures say how long and how many failed (before the reset). */
K8sReachabilityChange k8s_reachability_answered(K8sReachability *s, unsigned epoch, uint64_t now_usec,
                                                uint64_t *ret_down_usec, unsigned *ret_failures);
/* The request started at epoch got no answer at all (refused, reset, TLS,
 * timed out), with message. */
K8sReachabilityChange k8s_reachability_failed(K8sReachability *s, unsigned epoch, const char *message,
                                              uint64_t now_usec);
void k8s_reachability_done(K8sReachability *s);
