/* SPDX-License-Identifier: Apache-2.0 */
#include "volume/state/backoff.h"

void backoff_failed(Backoff *b, uint64_t now_usec) {
        if (b->duration_usec == 0)
                b->duration_usec = BACKOFF_INITIAL_USEC;
        else
                b->duration_usec = MIN(2 * b->duration_usec, BACKOFF_MAX_USEC);
        b->last_error_usec = now_usec;
}

void backoff_reset(Backoff *b) {
        *b = (Backoff){};
}

uint64_t backoff_next_try(const Backoff *b) {
        return b->last_error_usec == 0 ? 0 : b->last_error_usec + b->duration_usec;
}

bool backoff_allows(const Backoff *b, uint64_t now_usec) {
        return now_usec >= backoff_next_try(b);
}
