/* SPDX-License-Identifier: Apache-2.0 */
#include <sys/random.h>

#include "k8s/backoff.h"
#include "systemd/macro.h"

uint64_t k8s_backoff_next(K8sBackoff *b, double random01) {
        uint64_t d;

        if (b->current_usec == 0)
                b->current_usec = b->initial_usec;
        else
                b->current_usec = MIN(b->current_usec * 2, b->max_usec);
        d = b->current_usec;
        if (random01 < 0)
                random01 = 0;
        if (random01 >= 1)
                random01 = 0.999999;
        return d + (uint64_t) ((double) d * b->jitter * random01);
}

void k8s_backoff_reset(K8sBackoff *b) {
        b->current_usec = 0;
}

double k8s_random01(void) {
        uint64_t v = 0;

        /* Never blocks once the pool is initialised; the jitter does not
         * need to be unpredictable, so a failure just means no jitter. */
        if (getrandom(&v, sizeof v, GRND_NONBLOCK) != sizeof v)
                return 0.5;
        return (double) (v >> 11) / (double) (UINT64_C(1) << 53);
}
