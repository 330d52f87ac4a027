/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Per-operation exponential backoff with kubelet's constants
 * (goroutinemap/exponentialbackoff): 500 ms after the first failure, doubling,
 * capped at 2m2s; a success forgets it. */

#include "systemd/macro.h"

#define BACKOFF_INITIAL_USEC (500 * USEC_PER_MSEC)
#define BACKOFF_MAX_USEC (2 * USEC_PER_MINUTE + 2 * USEC_PER_SEC)

typedef struct Backoff {
        uint64_t last_error_usec; /* CLOCK_MONOTONIC of the last failure; 0: none */
        uint64_t duration_usec;   /* wait before the next try */
} Backoff;

void backoff_failed(Backoff *b, uint64_t now_usec);
void backoff_reset(Backoff *b);
/* When the next try may start (0: now). */
uint64_t backoff_next_try(const Backoff *b);
bool backoff_allows(const Backoff *b, uint64_t now_usec);
