/* SPDX-License-Identifier: Apache-2.0 */
/* Durability off the loop.  The metadata and intents a pass wrote must be
 * on disk before the CSI calls that can create mounts.  What kvolumed
 * changed below root-dir is noted as it is written (rootdir.c): each file,
 * each directory whose entries changed.  A sync makes exactly those
 * durable, an fdatasync() of each file, then an fsync() of each directory,
 * and nothing of anybody else's: syncfs(2), the rule before, waits for
 * every dirty page of root-dir's file system, whoever wrote it (on a node,
 * /var: the containers' logs, the runtime unpacking image layers, just when
 * pods start), measured at half a second for one record beside a busy
 * writer (test/bench/durability.sh, mount.sh --dirty).  The syncs still run
 * in a thread, as a journal commit can take a while, and the operations of
 * the pass start when it returns, from the loop.  Passes that end while a
 * sync runs wait for the next one (which takes what changed up to its
 * start), which covers all of them at once: at most two syncs are ever in
 * the air. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/internal.h"

typedef struct Batch {
        Operation **ops;
        size_t n, allocated;
} Batch;

struct RootSync {
        RootDir *root; /* not ours */
        int notify[2];      /* [0] read on the loop, [1] given (dup'ed) to each thread */
        sd_event_source *source;
        bool running;
        Batch syncing, waiting;
        root_sync_done_t done;
        void *userdata;
};

typedef struct SyncJob {
        int fd, notify;
        RootChanges changes;
} SyncJob;

/* What the loop reads of one sync, a datagram. */
typedef struct SyncResult {
        int error;
        unsigned files, dirs;
        bool all;
        uint64_t usec;
        char failed[256]; /* the first path that failed */
} SyncResult;

static uint64_t monotonic_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static void *sync_thread(void *p) {
        SyncJob *j = p;
        _cleanup_free_ char *failed = NULL;
        uint64_t start = monotonic_usec();
        SyncResult result = { .files = j->changes.n_files, .dirs = j->changes.n_dirs,
                              .all = j->changes.all || j->changes.whole_fs };

        result.error = root_changes_sync(j->fd, &j->changes, &failed);
        result.usec = monotonic_usec() - start;
        if (failed)
                (void) snprintf(result.failed, sizeof result.failed, "%s", failed);
        /* MSG_NOSIGNAL in case the loop's end is gone (the manager freed). */
        (void) send(j->notify, &result, sizeof result, MSG_NOSIGNAL);
        root_changes_done(&j->changes);
        close(j->fd);
        close(j->notify);
        free(j);
        return NULL;
}

static int sync_begin(RootSync *s) {
        pthread_attr_t attr;
        pthread_t t;
        SyncJob *j;
        int r;

        j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->fd = fcntl(s->root->fd, F_DUPFD_CLOEXEC, 3);
        j->notify = fcntl(s->notify[1], F_DUPFD_CLOEXEC, 3);
        if (j->fd < 0 || j->notify < 0) {
                r = -errno;
                if (j->fd >= 0)
                        close(j->fd);
                if (j->notify >= 0)
                        close(j->notify);
                free(j);
                return r;
        }
        /* Everything changed up to now, the writes of every pass waiting
         * included; what changes from here on goes to the next sync. */
        root_dir_take_changes(s->root, &j->changes);
        r = -pthread_attr_init(&attr);
        if (r == 0) {
                (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = -pthread_create(&t, &attr, sync_thread, j);
                (void) pthread_attr_destroy(&attr);
        }
        if (r < 0) {
                /* What was taken is lost to the notes: the sync done here
                 * instead (sync_next) is a syncfs(), covering it. */
                s->root->changed_all = true;
                root_changes_done(&j->changes);
                close(j->fd);
                close(j->notify);
                free(j);
                return r;
        }
        s->running = true;
        return 0;
}

static void batch_finish(RootSync *s, Batch *b, int error) {
        Operation **ops = TAKE_PTR(b->ops);
        size_t n = b->n;

        *b = (Batch) {};
        s->done(ops, n, error, s->userdata);
        free(ops);
}

/* Starts a sync for what waits; when no thread can be had, syncs here. */
static void sync_next(RootSync *s) {
        int r;

        if (s->running || s->waiting.n == 0)
                return;
        s->syncing = s->waiting;
        s->waiting = (Batch) {};
        r = sync_begin(s);
        if (r < 0) {
                log_warning_errno(r, "Cannot sync %s off the loop, syncing on it: %m", s->root->path);
                batch_finish(s, &s->syncing, root_dir_sync(s->root));
        }
}

static int on_synced(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        RootSync *s = userdata;
        SyncResult result = {};

        if (recv(fd, &result, sizeof result, MSG_DONTWAIT) != sizeof result)
                return 0;
        s->running = false;
        if (result.error < 0)
                log_warning_errno(result.error, "Failed to make %s/%s durable: %m", s->root->path, result.failed);
        else if (result.all)
                log_debug("Synced the file system of %s for %zu operations: %.1f ms", s->root->path, s->syncing.n,
                          (double) result.usec / USEC_PER_MSEC);
        else
                log_debug("Made %u files and %u directories under %s durable for %zu operations: %.1f ms",
                          result.files, result.dirs, s->root->path, s->syncing.n,
                          (double) result.usec / USEC_PER_MSEC);
        batch_finish(s, &s->syncing, result.error);
        sync_next(s);
        return 0;
}

int root_sync_new(sd_event *event, RootDir *root, root_sync_done_t done, void *userdata, RootSync **ret) {
        RootSync *s = calloc(1, sizeof *s);
        int r;

        if (!s)
                return -ENOMEM;
        s->root = root;
        s->done = done;
        s->userdata = userdata;
        s->notify[0] = s->notify[1] = -1;
        if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, s->notify) < 0) {
                r = -errno;
                root_sync_free(s);
                return r;
        }
        r = sd_event_add_io(event, &s->source, s->notify[0], EPOLLIN, on_synced, s);
        if (r < 0) {
                root_sync_free(s);
                return r;
        }
        (void) sd_event_source_set_description(s->source, "root-dir-sync");
        *ret = s;
        return 0;
}

RootSync *root_sync_free(RootSync *s) {
        if (!s)
                return NULL;
        sd_event_source_disable_unref(s->source);
        /* The operations are the volumes' (freed with them). */
        free(s->syncing.ops);
        free(s->waiting.ops);
        if (s->notify[0] >= 0)
                close(s->notify[0]);
        if (s->notify[1] >= 0)
                close(s->notify[1]);
        free(s);
        return NULL;
}

int root_sync_submit(RootSync *s, Operation **ops, size_t n) {
        Batch *b = &s->waiting;

        if (n == 0)
                return 0;
        if (b->n + n > b->allocated) {
                size_t want = MAX(b->allocated * 2, b->n + n);
                Operation **p = reallocarray(b->ops, want, sizeof *p);
                if (!p)
                        return -ENOMEM;
                b->ops = p;
                b->allocated = want;
        }
        memcpy(b->ops + b->n, ops, n * sizeof *ops);
        b->n += n;
        sync_next(s);
        return 0;
}

size_t root_sync_waiting(RootSync *s) {
        return s->syncing.n + s->waiting.n;
}
