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
 * the pass start when it returns, from the loop: one thread for the life of
 * kvolumed (started at the first sync, joined by root_sync_free()), as
 * starting one for each sync cost 0.05 ms of a new pod's publish.  Passes that end while a
 * sync runs wait for the next one (which takes what changed up to its
 * start), which covers all of them at once: at most two syncs are ever in
 * the air.
 *
 * With the intent log (intentlog.h), a pass whose records are all in it
 * needs one fdatasync() of the log before its calls: the records and the
 * directories naming them are then made durable by a second thread, one
 * take at a time in the order taken, which frees their slots after; a long
 * journal commit there (a busy neighbour) delays no call.  A take with a
 * record outside the log is made durable here before its calls, as before
 * the log, and its slots freed by the second thread too, so that slots are
 * freed in the order they were written.  A pass puts its records in the
 * log before it writes their files and kicks this thread (root_sync_kick),
 * so that the log's fdatasync() runs while the loop makes the directories;
 * a take found durable already when the pass ends goes to the second thread
 * from the loop, without this thread's round trip (durable_already). */
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
#include "systemd/trace.h"
#include "volume/host/intentlog.h"
#include "volume/host/paths.h"
#include "volume/internal.h"

/* Takes queued for the later thread at most: a pass beyond waits for it,
 * as every pass waited for its own files before the log, so that a burst
 * (thousands of volumes set up at once, each take up to CHANGED_MAX paths)
 * keeps a few takes' paths in memory, never the burst's. */
#define LATER_QUEUE_MAX 4

typedef struct Batch {
        Operation **ops;
        size_t n, allocated;
} Batch;

struct RootSync {
        RootDir *root; /* not ours; its fd and sync_pool are used by the thread */
        int notify[2]; /* [0] read on the loop, [1] written by the thread */
        sd_event_source *source;
        bool running;
        Batch syncing, waiting;
        root_sync_done_t done;
        void *userdata;

        /* The thread, and what the loop hands it. */
        pthread_t thread;
        bool thread_started;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        RootChanges job; /* under lock */
        bool job_ready;  /* under lock */
        bool stop;       /* under lock */
        /* The intent log synced early, while the loop makes the records'
         * directories and files (root_sync_kick); the job that follows then
         * finds it durable already.  At most one a job, so that a burst
         * flushes the disk's cache no more often than before. */
        bool kick;        /* under lock */
        bool kicked;      /* the loop's: since the last job began */
        int kick_error;   /* the sync thread's: the early sync failed, said by the next job */

        /* The records' own durability, after their calls (the log held them). */
        pthread_t later_thread;
        bool later_started;
        pthread_cond_t later_wake, later_room;
        RootChanges later[LATER_QUEUE_MAX]; /* under lock: a queue, oldest first */
        size_t n_later;
        bool later_stop;        /* under lock */
};

/* What the loop reads of one sync, a datagram. */
typedef struct SyncResult {
        int error;
        unsigned files, dirs;
        bool all;
        bool logged;     /* the records' slots were synced, the files come later */
        bool ahead;      /* ... by the sync kicked while they were written */
        bool later;      /* from the later thread: an error to say, no batch */
        uint64_t usec;
        char failed[256]; /* the first path that failed */
} SyncResult;

static uint64_t monotonic_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static void *later_thread(void *p);

/* Hands c (taken) to the later thread, started at its first take, waiting
 * for room in its queue.  Fails only when that thread cannot be started, so
 * with no take queued: the caller then makes c durable itself
 * (durable_now), and its slots are still freed after every earlier take's.
 * Without wait (the loop), -EAGAIN when the queue is full. */
static int later_push(RootSync *s, RootChanges *c, bool wait) {
        int r = 0;

        pthread_mutex_lock(&s->lock);
        if (!wait && s->later_started && s->n_later >= LATER_QUEUE_MAX) {
                pthread_mutex_unlock(&s->lock);
                return -EAGAIN;
        }
        while (s->later_started && s->n_later >= LATER_QUEUE_MAX)
                (void) pthread_cond_wait(&s->later_room, &s->lock);
        if (!s->later_started) {
                r = -pthread_create(&s->later_thread, NULL, later_thread, s);
                if (r == 0) {
                        (void) pthread_setname_np(s->later_thread, "kv-sync-later");
                        s->later_started = true;
                }
        }
        if (r == 0) {
                __atomic_add_fetch(&s->root->later_pending, 1, __ATOMIC_ACQ_REL);
                s->later[s->n_later++] = *c;
                *c = (RootChanges) {};
                (void) pthread_cond_signal(&s->later_wake);
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* A take made durable by itself: the files and directories, then its slots
 * freed and the frees made durable (so that no stale slot of a path
 * outlives a newer one freed: intentlog.h).  A take that fails keeps its
 * slots: the records are written back from the log at the next start. */
static int durable_now(RootSync *s, const RootChanges *c, char **ret_failed) {
        IntentLog *log = s->root->intents;
        int r = 0;

        if (c->n_files > 0 || c->n_dirs > 0 || c->all)
                r = root_changes_sync(s->root->sync_pool, s->root->fd, c, ret_failed);
        if (r >= 0 && log && c->n_slots > 0) {
                intent_log_release(log, c->slots, c->n_slots);
                r = intent_log_sync(log);
        }
        return r;
}

/* What the later thread does with one take. */
static void later_job(RootSync *s, RootChanges *c) {
        _cleanup_free_ char *failed = NULL;
        SyncResult result = { .later = true, .files = c->n_files, .dirs = c->n_dirs };
        uint64_t start = monotonic_usec();

        root_test_hold("LATER_HOLD");
        /* The bench's view of whether a new pod's flush met this work (resync_bench.py). */
        test_trace("later-begin", NULL);
        result.error = durable_now(s, c, &failed);
        test_trace("later-end", NULL);
        result.usec = monotonic_usec() - start;
        if (result.error >= 0)
                return;
        /* Its slots stay: the records are written back from the log at the next start. */
        (void) snprintf(result.failed, sizeof result.failed, "%s", failed ?: INTENT_LOG_FILE);
        (void) send(s->notify[1], &result, sizeof result, MSG_NOSIGNAL);
}

/* Blocked on s->later_wake between takes; the queue is emptied before stop.
 * A take waits LATER_DELAY_USEC first: its calls are then under way, and
 * this thread's journal commits and flushes do not compete with the driver
 * for the disk and the CPU while it receives them (a new pod's call reached
 * the mock driver 0.3 ms later with them in parallel); the log holds the
 * records meanwhile. */
#define LATER_DELAY_USEC (20 * USEC_PER_MSEC)

static void later_wait_delay(RootSync *s) {
        struct timespec until;

        (void) clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long) (LATER_DELAY_USEC % USEC_PER_SEC) * 1000;
        until.tv_sec += LATER_DELAY_USEC / USEC_PER_SEC + until.tv_nsec / 1000000000;
        until.tv_nsec %= 1000000000;
        while (!s->later_stop && pthread_cond_timedwait(&s->later_wake, &s->lock, &until) != ETIMEDOUT)
                ;
}

static void *later_thread(void *p) {
        RootSync *s = p;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                while (s->n_later == 0 && !s->later_stop)
                        (void) pthread_cond_wait(&s->later_wake, &s->lock);
                if (s->n_later == 0)
                        break;
                /* Once for what queued meanwhile: then every take, in order. */
                later_wait_delay(s);
                while (s->n_later > 0) {
                        RootChanges c = s->later[0];
                        memmove(s->later, s->later + 1, (s->n_later - 1) * sizeof *s->later);
                        s->n_later--;
                        (void) pthread_cond_signal(&s->later_room);
                        pthread_mutex_unlock(&s->lock);

                        later_job(s, &c);
                        root_changes_done(&c);
                        __atomic_sub_fetch(&s->root->later_pending, 1, __ATOMIC_ACQ_REL);

                        pthread_mutex_lock(&s->lock);
                }
        }
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

static void sync_job(RootSync *s, RootChanges *c) {
        _cleanup_free_ char *failed = NULL;
        uint64_t start = monotonic_usec();
        SyncResult result = { .files = c->n_files, .dirs = c->n_dirs, .all = c->all || c->whole_fs };
        RootChanges slots_only = {};

        if (s->root->intents && root_changes_logged(c)) {
                /* The records are in the log: its one fdatasync() before the
                 * calls, their files and directories later. */
                result.logged = true;
                result.files = c->n_slots;
                result.error = intent_log_sync(s->root->intents);
                if (s->kick_error < 0 && result.error >= 0)
                        result.error = s->kick_error;
                s->kick_error = 0;
                if (later_push(s, c, true) < 0) {
                        int r = durable_now(s, c, &failed);
                        result.error = result.error < 0 ? result.error : r;
                }
        } else {
                /* A failed early sync was for this take's slots (a kick
                 * only comes before the take that holds them), whose records
                 * are now made durable by themselves: an error here is said
                 * here, and left to no later take. */
                s->kick_error = 0;
                result.error = root_changes_sync(s->root->sync_pool, s->root->fd, c, &failed);
                /* Freed after every earlier take's: by the later thread too. */
                if (result.error >= 0 && c->n_slots > 0) {
                        slots_only = (RootChanges) { .slots = TAKE_PTR(c->slots), .n_slots = c->n_slots };
                        c->n_slots = 0;
                        if (later_push(s, &slots_only, true) < 0)
                                (void) durable_now(s, &slots_only, NULL); /* the records are durable already */
                        root_changes_done(&slots_only);
                }
        }
        result.usec = monotonic_usec() - start;
        if (result.logged && result.error < 0 && !failed)
                failed = strdup(INTENT_LOG_FILE); /* the log's own sync, or the early one */
        if (failed)
                (void) snprintf(result.failed, sizeof result.failed, "%s", failed);
        /* MSG_NOSIGNAL: nothing reads it once root_sync_free() began. */
        (void) send(s->notify[1], &result, sizeof result, MSG_NOSIGNAL);
}

/* Blocked on s->wake between syncs; a job handed before stop is synced. */
static void *sync_thread(void *p) {
        RootSync *s = p;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                while (!s->job_ready && !s->kick && !s->stop)
                        (void) pthread_cond_wait(&s->wake, &s->lock);
                if (!s->job_ready && s->kick && !s->stop) {
                        s->kick = false;
                        pthread_mutex_unlock(&s->lock);
                        int r = intent_log_sync(s->root->intents);
                        if (r < 0 && s->kick_error == 0)
                                s->kick_error = r;
                        test_trace("log-synced-ahead", NULL);
                        pthread_mutex_lock(&s->lock);
                        continue;
                }
                if (!s->job_ready)
                        break;
                s->kick = false; /* the job syncs the log itself */
                RootChanges c = s->job;
                s->job = (RootChanges) {};
                s->job_ready = false;
                pthread_mutex_unlock(&s->lock);

                sync_job(s, &c);
                root_changes_done(&c);

                pthread_mutex_lock(&s->lock);
        }
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

static int start_sync_thread(RootSync *s) {
        int r;

        if (s->thread_started)
                return 0;
        r = -pthread_create(&s->thread, NULL, sync_thread, s);
        if (r < 0)
                return r;
        (void) pthread_setname_np(s->thread, "kv-sync");
        s->thread_started = true;
        return 0;
}

static void batch_finish(RootSync *s, Batch *b, int error) {
        Operation **ops = TAKE_PTR(b->ops);
        size_t n = b->n;

        *b = (Batch) {};
        s->done(ops, n, error, s->userdata);
        free(ops);
}

/* A take whose records are all in the log, already made durable by the
 * sync kicked while they were written (root_sync_kick): handed to the
 * later thread from here, its operations told through the same socket as
 * by the sync thread, without that thread's round trip. */
static bool durable_already(RootSync *s, RootChanges *c) {
        SyncResult result = { .logged = true, .ahead = true, .files = c->n_slots };

        if (!s->root->intents || !root_changes_logged(c) || !intent_log_durable(s->root->intents) ||
            later_push(s, c, false) < 0)
                return false;
        /* One result in the socket at most (and the later thread's
         * errors): should it still not take this one, the batch is done here. */
        if (send(s->notify[1], &result, sizeof result, MSG_NOSIGNAL) != sizeof result) {
                s->running = false;
                batch_finish(s, &s->syncing, 0);
        }
        return true;
}

static int sync_begin(RootSync *s) {
        RootChanges c;
        int r;

        /* Nothing taken yet if it cannot start: the sync done on the loop
         * instead (sync_next) takes it. */
        r = start_sync_thread(s);
        if (r < 0)
                return r;
        s->kicked = false;
        /* Everything changed up to now, the writes of every pass waiting
         * included; what changes from here on goes to the next sync. */
        root_dir_take_changes(s->root, &c);
        s->running = true;
        if (durable_already(s, &c))
                return 0;
        pthread_mutex_lock(&s->lock);
        s->job = c;
        s->job_ready = true;
        (void) pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        return 0;
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
        if (result.later) {
                log_warning_errno(result.error, "Failed to make %s/%s durable after its calls, keeping its "
                                  "records in the intent log: %m", s->root->path, result.failed);
                return 0;
        }
        s->running = false;
        if (result.error < 0)
                log_warning_errno(result.error, "Failed to make %s/%s durable: %m", s->root->path, result.failed);
        else if (result.logged && result.ahead)
                log_debug("The intent log of %s was made durable while %u records were written, for %zu operations",
                          s->root->path, result.files, s->syncing.n);
        else if (result.logged)
                log_debug("Made the intent log of %s durable for %u records and %zu operations: %.1f ms",
                          s->root->path, result.files, s->syncing.n, (double) result.usec / USEC_PER_MSEC);
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
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->wake, NULL);
        pthread_condattr_t monotonic;
        pthread_condattr_init(&monotonic);
        (void) pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
        pthread_cond_init(&s->later_wake, &monotonic);
        pthread_cond_init(&s->later_room, NULL);
        pthread_condattr_destroy(&monotonic);
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

/* Tells a thread to stop (its flag set under the lock) and joins it. */
static void stop_thread(RootSync *s, pthread_t thread, bool *stop, pthread_cond_t *wake) {
        pthread_mutex_lock(&s->lock);
        *stop = true;
        (void) pthread_cond_signal(wake);
        pthread_mutex_unlock(&s->lock);
        (void) pthread_join(thread, NULL);
}

RootSync *root_sync_free(RootSync *s) {
        if (!s)
                return NULL;
        /* After the sync in progress, if any (root-dir stays until then: the
         * manager frees it after this); then after every take queued for
         * the later thread, which it may still push to. */
        if (s->thread_started)
                stop_thread(s, s->thread, &s->stop, &s->wake);
        if (s->later_started)
                stop_thread(s, s->later_thread, &s->later_stop, &s->later_wake);
        for (size_t i = 0; i < s->n_later; i++)
                root_changes_done(&s->later[i]);
        /* Records written since the last take (no pass synced them): durable
         * now, and their slots freed, so that a clean stop leaves the log
         * empty, as a handover to kubelet expects of kvolumed's own state. */
        if (s->root->n_logged > 0)
                (void) root_dir_sync(s->root);
        sd_event_source_disable_unref(s->source);
        /* The operations are the volumes' (freed with them). */
        free(s->syncing.ops);
        free(s->waiting.ops);
        if (s->notify[0] >= 0)
                close(s->notify[0]);
        if (s->notify[1] >= 0)
                close(s->notify[1]);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->later_wake);
        pthread_cond_destroy(&s->later_room);
        pthread_mutex_destroy(&s->lock);
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

void root_sync_kick(RootSync *s) {
        if (!s->root->intents || s->kicked || start_sync_thread(s) < 0)
                return;
        s->kicked = true;
        pthread_mutex_lock(&s->lock);
        s->kick = true;
        (void) pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
}

size_t root_sync_waiting(RootSync *s) {
        return s->syncing.n + s->waiting.n;
}
