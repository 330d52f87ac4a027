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

void k8s_host_backoff_init(K8sHostBackoff *b, uint64_t base_usec, uint64_t max_usec) {
        *b = (K8sHostBackoff) {
                .base_usec = base_usec,
                .max_usec = MAX(base_usec, max_usec),
        };
}

uint64_t k8s_host_backoff_wait_usec(const K8sHostBackoff *b, uint64_t now_usec) {
        if (b->failures == 0)
                return 0;
        if (b->probing)
                return UINT64_MAX;
        return b->not_before_usec > now_usec ? b->not_before_usec - now_usec : 0;
}

bool k8s_host_backoff_begin(K8sHostBackoff *b, unsigned *ret_epoch) {
        *ret_epoch = b->epoch;
        if (b->failures == 0)
                return false;
        b->probing = true;
        return true;
}

bool k8s_host_backoff_end(K8sHostBackoff *b, unsigned epoch, bool probe, bool answered, uint64_t now_usec) {
        uint64_t step;

        if (probe)
                b->probing = false;
        /* A request from before the last change says nothing new: answered,
         * its answer may have come before the server went (a loaded loop
         * reads it late); failed, the first of its kind already counted. */
        if (epoch != b->epoch)
                return false;
        if (answered) {
                if (b->failures == 0)
                        return false;
                b->failures = 0;
                b->epoch++;
                return true;
        }
        b->failures++;
        b->epoch++;
        step = b->base_usec;
        for (unsigned i = 1; i < b->failures && step < b->max_usec; i++)
                step *= 2;
        b->not_before_usec = now_usec + MIN(step, b->max_usec);
        return b->failures == 1;
}

void k8s_host_backoff_abandon(K8sHostBackoff *b, bool probe) {
        if (probe)
                b->probing = false;
}
