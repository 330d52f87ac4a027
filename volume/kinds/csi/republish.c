/* SPDX-License-Identifier: Apache-2.0 */
/* The republish schedule of drivers with CSIDriver.spec.requiresRepublish:
 * while a pod runs, NodePublishVolume is called again, with fresh tokens, at
 * [csi] republish-interval, or earlier when a token passed last time is
 * within 20 % of its lifetime of expiring (kubelet only has its pod resync,
 * which can let a short-lived token expire).  Every time is jittered, so
 * that a burst of pods published together does not republish in lockstep.
 * The schedule lives in memory only: after a restart the tokens given
 * before are unknown (they are never written down), so a reconstructed
 * publish is republished promptly, at a random moment within a short
 * window, rather than a whole interval later. */
#include <time.h>

#include "k8s/backoff.h"
#include "systemd/trace.h"
#include "volume/internal.h"
#include "volume/kinds/csi/kind.h"

#define REPUBLISH_DEFAULT_INTERVAL_USEC USEC_PER_MINUTE
/* The first republish of a publish whose schedule is unknown (found after
 * a restart, or a driver that became requiresRepublish) comes within this. */
#define REPUBLISH_UNKNOWN_WINDOW_USEC (15 * USEC_PER_SEC)

static uint64_t interval_of(const VolumeManager *m) {
        return m->republish_interval_usec > 0 ? m->republish_interval_usec : REPUBLISH_DEFAULT_INTERVAL_USEC;
}

uint64_t republish_next(uint64_t now, uint64_t interval, double spread, uint64_t now_realtime,
                        uint64_t token_due_realtime, double random01) {
        /* Up to "spread" of the interval early, at random: a burst spreads
         * out, and keeps spreading, since each pod draws anew each time. */
        uint64_t next = now + interval - (uint64_t) ((double) interval * spread * random01);

        if (token_due_realtime != UINT64_MAX) {
                uint64_t wait = token_due_realtime > now_realtime ? token_due_realtime - now_realtime : 0;
                next = MIN(next, now + wait);
        }
        return next;
}

static uint64_t realtime_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static bool driver_requires_republish(VolumeManager *m, const char *driver) {
        const K8sCSIDriver *d = csi_driver_object(m, driver);
        return d && d->requires_republish;
}

/* TEST ONLY (trace.h): the delay this publish drew, as two wall-clock
 * lines, "republish-scheduled" (the loop's time it was drawn at) and
 * "republish-due": a test reads the spread kvolumed chose, which a busy
 * machine's scheduler cannot bunch up as it does the calls' arrivals. */
static void trace_schedule(uint64_t now, uint64_t at, const char *pod_uid) {
        struct timespec ts;
        uint64_t realtime = test_trace_now(), mono;

        if (realtime == 0)
                return;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        mono = (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
        /* The loop's "now" is when this iteration began: as long ago on the wall clock. */
        realtime -= MIN(realtime, mono > now ? mono - now : 0);
        test_trace_at(realtime, "republish-scheduled", pod_uid);
        test_trace_at(realtime + (at - now), "republish-due", pod_uid);
}

void republish_schedule(VolumeManager *m, const Operation *op, ActualPublish *pub) {
        uint64_t now = 0, next;

        if (!driver_requires_republish(m, op->av->driver)) {
                pub->republish_at = 0;
                return;
        }
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        /* The first time over the second half of the interval: pods started
         * in a burst spread out at once; later on, a quarter keeps them so. */
        next = republish_next(now, interval_of(m), op->republish ? 0.25 : 0.5, realtime_usec(),
                              tokens_refresh_due_realtime(op->tokens, k8s_random01()), k8s_random01());
        /* Never sooner than a second from now: a token whose lifetime is
         * mostly gone already must not make a republish loop. */
        pub->republish_at = MAX(next, now + USEC_PER_SEC);
        trace_schedule(now, pub->republish_at, op->pod.uid);
}

bool republish_due(VolumeManager *m, const ActualVolume *av, ActualPublish *pub, uint64_t now,
                   uint64_t *next_wake) {
        /* Raw block publishes are not republished: the device is mapped to
         * the pod once, and tokens go with file system publishes only. */
        if (av->block || pub->stale || pub->state != PUBLISH_DONE || !driver_requires_republish(m, av->driver))
                return false;
        if (pub->republish_at == 0) {
                /* Schedule unknown: found after a restart (its tokens may be
                 * near expiry), or the driver started to require republish. */
                uint64_t window = MIN(interval_of(m) / 4, REPUBLISH_UNKNOWN_WINDOW_USEC);
                pub->republish_at = now + (uint64_t) ((double) window * k8s_random01());
                if (pub->republish_at == 0)
                        pub->republish_at = 1;
        }
        if (now >= pub->republish_at)
                return true;
        *next_wake = MIN(*next_wake, pub->republish_at);
        return false;
}
