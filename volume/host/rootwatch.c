/* SPDX-License-Identifier: Apache-2.0 */
/* root-dir is the path, not the directory found there at start.  kvolumed
 * locked both at start (volume/host/rootlock.h).  Should the path stop naming
 * that directory — a file system mounted over it (a node's data disk
 * mounted at /var/lib/kubelet after kvolumed started), the directory
 * renamed away and made again, a symlink in its path changed — the paths
 * kvolumed gives the drivers would name the new directory while its records
 * went to the old one through its descriptor, and the mount table would be
 * read under a name that no longer holds the mounts.  Then the manager acts
 * on nothing: no pass (no CSI call, no teardown), no record written by the
 * mount watch, and each operation in flight held at its next step, its CSI
 * call already made left to answer.  The operator is told once, at err
 * level, with what changed and what to do; /healthz fails and STATUS= says
 * why.
 *
 * Once the path names the directory again (what was mounted over it
 * unmounted, the directory renamed back), the held operations go on and a
 * full pass and a read of the whole mount table follow: nothing else can
 * have acted there meanwhile, since the path's lock keeps any other
 * kvolumed from starting on it.  A kvolumed that stays stopped would leave
 * every pod of the node without its volumes until someone restarts it, for
 * a mistake that is often undone within minutes.
 *
 * Looked at before every pass, after every change of the mount namespace
 * (POLLPRI of /proc/self/mountinfo: any mount or unmount, at root-dir or
 * above it too, which the mount table of volume/host/mounttable.c does not
 * track), and every ROOT_CHECK_INTERVAL_USEC: a rename makes no mount
 * event. */
#include <fcntl.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/internal.h"

#define ROOT_CHECK_INTERVAL_USEC (5 * USEC_PER_SEC)

typedef struct Held {
        Operation *op;
        OpResume how;
} Held;

struct RootWatch {
        RootLock *lock;
        int mountinfo_fd;
        sd_event_source *mounts_source; /* the mount namespace changed */
        sd_event_source *timer;         /* every ROOT_CHECK_INTERVAL_USEC */
        sd_event_source *resume_source; /* the held operations go on, from the loop */
        char *lost;                     /* why root-dir is not kvolumed's; NULL: it is */
        Held *held;
        size_t n_held, allocated;
};

static void tell(VolumeManager *m) {
        if (m->root_hook)
                m->root_hook(m->root_watch->lost, m->root_userdata);
}

static void lost(VolumeManager *m, const char *why) {
        RootWatch *w = m->root_watch;
        const char *path = root_lock_path(w->lock);

        w->lost = strdup(why);
        if (!w->lost)
                w->lost = strdup("root-dir is not the directory kvolumed locked at start");
        m->root_lost = true;
        log_error("%s. kvolumed stopped acting on volumes (no CSI call, no record written, no teardown; /healthz "
                  "fails) until %s is again the directory it locked at start; no other kvolumed can start on %s "
                  "meanwhile.  What to do: unmount what was mounted over %s, or rename the directory back, and "
                  "kvolumed goes on by itself; or stop kvolumed, set root-dir right (the file system that holds "
                  "it mounted before kvolumed starts: RequiresMountsFor= in its unit) and start it again",
                  why, path, path, path);
        tell(m);
}

static void regained(VolumeManager *m) {
        RootWatch *w = m->root_watch;

        log_notice("root-dir %s is the directory kvolumed locked at start again: acting on volumes again%s",
                   root_lock_path(w->lock), w->n_held > 0 ? ", the operations held meanwhile first" : "");
        m->root_lost = false;
        w->lost = mfree_str(w->lost);
        if (w->n_held > 0)
                (void) sd_event_source_set_enabled(w->resume_source, SD_EVENT_ONESHOT);
        /* What changed meanwhile was not looked at: all of it now. */
        mount_table_refresh_soon(m->mounts, 0);
        manager_schedule_pass(m);
        tell(m);
}

bool root_watch_check(VolumeManager *m) {
        RootWatch *w = m->root_watch;
        _cleanup_free_ char *why = NULL;
        int r;

        if (!w)
                return true;
        r = root_lock_check(w->lock, &why);
        if (r < 0) {
                if (!m->root_lost)
                        lost(m, why ?: strerror(-r));
                return false;
        }
        if (m->root_lost)
                regained(m);
        return true;
}

static LogFields op_log_fields(const Operation *op) {
        return (LogFields){ .pod_uid = op->pod.uid, .pod = op->pod.key, .volume = op->spec_name,
                            .driver = op->av->driver, .volume_handle = op->av->handle };
}

/* An operation ends without another step: kvolumed stops. */
static void abandon(VolumeManager *m, Operation *op) {
        LogFields f = op_log_fields(op);

        log_fields(LOG_INFO, &f, "Leaving the %s of %s where it is: root-dir %s is not the directory kvolumed "
                   "locked; its records say what may exist, for the next start", op_kind_to_string(op->kind),
                   op->av->unique_name, root_lock_path(m->root_watch->lock));
        free(op->message);
        op->message = strdup("kvolumed stopped while root-dir was not the directory it locked");
        manager_operation_done(m, op, false);
}

void root_watch_park(VolumeManager *m, Operation *op, OpResume how) {
        RootWatch *w = m->root_watch;
        LogFields f = op_log_fields(op);

        if (m->stopping) {
                abandon(m, op);
                return;
        }
        if (w->n_held == w->allocated) {
                size_t want = w->allocated ? 2 * w->allocated : 16;
                Held *held = reallocarray(w->held, want, sizeof *held);
                if (!held) {
                        /* Nothing more of it is done either way: its records say
                         * what may exist, and a pass plans it again. */
                        abandon(m, op);
                        return;
                }
                w->held = held;
                w->allocated = want;
        }
        w->held[w->n_held++] = (Held){ op, how };
        log_fields(LOG_DEBUG, &f, "Holding the %s of %s: root-dir %s is not the directory kvolumed locked",
                   op_kind_to_string(op->kind), op->av->unique_name, root_lock_path(w->lock));
}

/* Takes the held operations out of the watch: what they do next may hold
 * some of them again. */
static Held *take_held(RootWatch *w, size_t *ret_n) {
        Held *held = TAKE_PTR(w->held);

        *ret_n = w->n_held;
        w->n_held = w->allocated = 0;
        return held;
}

void root_watch_stop(VolumeManager *m) {
        _cleanup_free_ Held *held = NULL;
        size_t n = 0;

        if (!m->root_watch)
                return;
        held = take_held(m->root_watch, &n);
        for (size_t i = 0; i < n; i++)
                abandon(m, held[i].op);
}

static int on_resume(sd_event_source *s, void *userdata) {
        VolumeManager *m = userdata;
        _cleanup_free_ Held *held = NULL;
        size_t n = 0;

        if (m->root_lost || m->stopping)
                return 0; /* lost again: still held; stopping: ended already */
        held = take_held(m->root_watch, &n);
        for (size_t i = 0; i < n; i++)
                operation_resume(held[i].op, held[i].how);
        return 0;
}

static int on_mounts_changed(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        /* poll() of the file said it and forgot it: nothing to read. */
        (void) root_watch_check(userdata);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) root_watch_check(userdata);
        (void) sd_event_source_set_time_relative(s, ROOT_CHECK_INTERVAL_USEC);
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

int root_watch_new(VolumeManager *m, RootLock *lock) {
        RootWatch *w;
        int r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        m->root_watch = w;
        w->lock = lock;
        w->mountinfo_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        if (w->mountinfo_fd < 0)
                return -errno;
        /* Ahead of the loop's other work: a CSI call's answer dispatched
         * after a mount over root-dir must find the manager stopped. */
        r = sd_event_add_io(m->event, &w->mounts_source, w->mountinfo_fd, EPOLLPRI, on_mounts_changed, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_priority(w->mounts_source, SD_EVENT_PRIORITY_IMPORTANT);
        (void) sd_event_source_set_description(w->mounts_source, "root-dir-mounts");
        r = sd_event_add_time_relative(m->event, &w->timer, CLOCK_MONOTONIC, ROOT_CHECK_INTERVAL_USEC,
                                       USEC_PER_SEC, on_timer, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(w->timer, "root-dir-check");
        r = sd_event_add_defer(m->event, &w->resume_source, on_resume, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(w->resume_source, SD_EVENT_OFF);
        return 0;
}

void root_watch_free(VolumeManager *m) {
        RootWatch *w = m->root_watch;

        if (!w)
                return;
        sd_event_source_disable_unref(w->mounts_source);
        sd_event_source_disable_unref(w->timer);
        sd_event_source_disable_unref(w->resume_source);
        if (w->mountinfo_fd >= 0)
                (void) close(w->mountinfo_fd);
        free(w->lost);
        /* The operations it held belong to their volumes, which free them. */
        free(w->held);
        free(w);
        m->root_watch = NULL;
}

const char *volume_manager_root_lost(VolumeManager *m) {
        return m->root_watch ? m->root_watch->lost : NULL;
}
