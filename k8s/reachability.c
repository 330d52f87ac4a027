/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>

#include "k8s/reachability.h"
#include "systemd/macro.h"

K8sReachabilityChange k8s_reachability_answered(K8sReachability *s, unsigned epoch, uint64_t now_usec,
                                                uint64_t *ret_down_usec, unsigned *ret_failures) {
        if (s->unreachable_since == 0 || epoch != s->epoch)
                return K8S_REACHABILITY_SAME;
        if (ret_down_usec)
                *ret_down_usec = now_usec > s->unreachable_since ? now_usec - s->unreachable_since : 0;
        if (ret_failures)
                *ret_failures = s->failures;
        s->unreachable_since = 0;
        s->failures = 0;
        s->error = mfree_str(s->error);
        s->epoch++;
        return K8S_REACHABILITY_BACK;
}

K8sReachabilityChange k8s_reachability_failed(K8sReachability *s, unsigned epoch, const char *message,
                                              uint64_t now_usec) {
        if (s->unreachable_since != 0) {
                /* Counted whenever it was sent: the operator's "N requests
                 * failed meanwhile" is about the whole outage. */
                s->failures++;
                (void) free_and_strdup(&s->error, strempty(message));
                return K8S_REACHABILITY_SAME;
        }
        if (epoch != s->epoch)
                return K8S_REACHABILITY_SAME; /* sent before the server answered again */
        s->failures = 1;
        (void) free_and_strdup(&s->error, strempty(message));
        s->unreachable_since = MAX(now_usec, 1u);
        s->epoch++;
        return K8S_REACHABILITY_DOWN;
}

void k8s_reachability_done(K8sReachability *s) {
        s->error = mfree_str(s->error);
}
