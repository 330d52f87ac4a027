/* SPDX-License-Identifier: Apache-2.0 */
/* Durability off the loop.  The metadata and intents a pass wrote must be
 * on disk before the CSI calls that can create mounts; one syncfs(2) of
 * root-dir's file system covers a whole pass.  But syncfs waits for every
 * dirty page of that file system, whoever wrote it: measured on a shared
 * disk, 70-100 ms for a pass that started one operation, the loop deaf
 * meanwhile (/healthz unanswered).  So it runs in a thread, and the
 * operations of the pass start when it returns, from the loop.  Passes that
 * end while a sync runs wait for the next one (started after their writes),
 * which covers all of them at once: at most two syncs are ever in the air. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/internal.h"

typedef struct Batch {
        Operation **ops;
        size_t n, allocated;
} Batch;

struct RootSync {
        int root_fd; /* not ours */
        int notify[2];      /* [0] read on the loop, [1] given (dup'ed) to each thread */
        sd_event_source *source;
        bool running;
        Batch syncing, waiting;
        root_sync_done_t done;
        void *userdata;
};

typedef struct SyncJob {
        int fd, notify;
} SyncJob;

static void *sync_thread(void *p) {
        SyncJob *j = p;
        int result = syncfs(j->fd) < 0 ? -errno : 0;

        /* A datagram: the loop reads one result per sync; MSG_NOSIGNAL in
         * case the loop's end is gone (the manager freed). */
        (void) send(j->notify, &result, sizeof result, MSG_NOSIGNAL);
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
        j->fd = fcntl(s->root_fd, F_DUPFD_CLOEXEC, 3);
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
        r = -pthread_attr_init(&attr);
        if (r == 0) {
                (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = -pthread_create(&t, &attr, sync_thread, j);
                (void) pthread_attr_destroy(&attr);
        }
        if (r < 0) {
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
                log_warning_errno(r, "Cannot sync root-dir off the loop, syncing on it: %m");
                r = syncfs(s->root_fd) < 0 ? -errno : 0;
                batch_finish(s, &s->syncing, r);
        }
}

static int on_synced(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        RootSync *s = userdata;
        int result = 0;

        if (recv(fd, &result, sizeof result, MSG_DONTWAIT) != sizeof result)
                return 0;
        s->running = false;
        batch_finish(s, &s->syncing, result);
        sync_next(s);
        return 0;
}

int root_sync_new(sd_event *event, int root_fd, root_sync_done_t done, void *userdata, RootSync **ret) {
        RootSync *s = calloc(1, sizeof *s);
        int r;

        if (!s)
                return -ENOMEM;
        s->root_fd = root_fd;
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
