/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Capped, jittered exponential backoff (client-go's reflector: 800 ms
 * doubling to 30 s, jitter 1.0 = up to +100%). */

#include <stdint.h>

typedef struct K8sBackoff {
        uint64_t initial_usec;
        uint64_t max_usec;
        double jitter; /* the delay is d * (1 + jitter * random[0,1)) */
        uint64_t current_usec; /* 0: next delay is initial */
} K8sBackoff;

#define K8S_BACKOFF_REFLECTOR                                                                             \
        ((K8sBackoff) { .initial_usec = 800 * 1000, .max_usec = 30 * 1000 * 1000, .jitter = 1.0 })

/* The next delay, given a uniform random number in [0,1); advances the state. */
uint64_t k8s_backoff_next(K8sBackoff *b, double random01);
void k8s_backoff_reset(K8sBackoff *b);

/* A uniform random number in [0,1) from the kernel's generator. */
double k8s_random01(void);
