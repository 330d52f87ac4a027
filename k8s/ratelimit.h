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
