/* SPDX-License-Identifier: Apache-2.0 */
#include <math.h>

#include "k8s/ratelimit.h"
#include "systemd/macro.h"

void k8s_token_bucket_init(K8sTokenBucket *b, double rate, double burst, uint64_t now_usec) {
        *b = (K8sTokenBucket) {
                .tokens = burst,
                .rate = rate,
                .burst = burst,
                .last_usec = now_usec,
        };
}

static void token_bucket_refill(K8sTokenBucket *b, uint64_t now_usec) {
        if (now_usec <= b->last_usec)
                return;
        b->tokens = MIN(b->burst, b->tokens + (double) (now_usec - b->last_usec) * b->rate / 1e6);
        b->last_usec = now_usec;
}

bool k8s_token_bucket_take(K8sTokenBucket *b, uint64_t now_usec) {
        token_bucket_refill(b, now_usec);
        if (b->tokens < 1.0)
                return false;
        b->tokens -= 1.0;
        return true;
}

uint64_t k8s_token_bucket_wait_usec(K8sTokenBucket *b, uint64_t now_usec) {
        token_bucket_refill(b, now_usec);
        if (b->tokens >= 1.0)
                return 0;
        if (b->rate <= 0)
                return UINT64_MAX;
        return (uint64_t) ceil((1.0 - b->tokens) * 1e6 / b->rate);
}
