/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "systemd/fileio.h"
#include "systemd/log.h"
#include "volume/host/intentlog.h"

/* A slot: the header, then the path (no NUL), then the record's bytes.  The
 * checksum covers everything after itself, up to the record's end. */
#define MAGIC "KVINTENT"
#define VERSION 1u

typedef struct SlotHeader {
        char magic[8];
        uint8_t sha256[32];
        uint32_t version;
        uint32_t mode;
        uint64_t seq;
        uint32_t path_len;
        uint32_t data_len;
        char boot_id[40]; /* the boot it was written in, NUL-padded */
} SlotHeader;

_Static_assert(sizeof(SlotHeader) == 104, "a slot header is 104 bytes");
#define CHECKED_FROM offsetof(SlotHeader, version)
#define ROOM (INTENT_LOG_SLOT_SIZE - sizeof(SlotHeader))
#define LOG_SIZE ((off_t) INTENT_LOG_SLOT_SIZE * INTENT_LOG_SLOTS)

struct IntentLog {
        int fd;
        char boot_id[40];
        pthread_mutex_t lock;
        uint64_t next_seq;               /* under lock */
        bool live[INTENT_LOG_SLOTS];     /* under lock */
        size_t n_live;                   /* under lock */
        bool broken;                     /* under lock: a free could not be written */
        /* Each write of a slot (a put, a free) counts once it returned; a sync
         * records the count it covers, so that a sync with nothing written
         * since the last that returned writes nothing (rootsync.c syncs the
         * log early, while the pass makes the records' directories). */
        uint64_t n_written;              /* under lock */
        uint64_t n_synced;               /* under lock */
        unsigned n_fdatasyncs;           /* under lock: tests */
        _Alignas(SlotHeader) uint8_t slot[INTENT_LOG_SLOT_SIZE]; /* the loop's buffer for put */
};

static int checksum(const uint8_t *slot, size_t end, uint8_t ret[32]) {
        unsigned len = 0;

        if (EVP_Digest(slot + CHECKED_FROM, end - CHECKED_FROM, ret, &len, EVP_sha256(), NULL) != 1 || len != 32)
                return -EIO;
        return 0;
}

/* Zeros, written (not a hole, not fallocate's unwritten extents: writing a
 * slot later must find its blocks allocated and written), then durable
 * with its name in dir_fd. */
static int make_log(int dir_fd, const char *name) {
        _cleanup_free_ uint8_t *zeros = calloc(1, LOG_SIZE);
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -1, dir = -1;
        int r;

        if (!zeros || asprintf(&tmp, ".%s.tmp", name) < 0)
                return -ENOMEM;
        (void) unlinkat(dir_fd, tmp, 0);
        fd = openat(dir_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        r = loop_pwrite(fd, zeros, LOG_SIZE, 0);
        if (r < 0 || fsync(fd) < 0 || renameat(dir_fd, tmp, dir_fd, name) < 0) {
                r = r < 0 ? r : -errno;
                (void) unlinkat(dir_fd, tmp, 0);
                return r;
        }
        /* dir_fd may be an O_PATH descriptor: fsync() needs one opened. */
        dir = openat(dir_fd, ".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (dir < 0 || fsync(dir) < 0)
                return -errno;
        return 0;
}

int intent_log_open(int dir_fd, const char *name, const char *boot_id, IntentLog **ret) {
        _cleanup_(intent_log_freep) IntentLog *l = NULL;
        struct stat st;
        bool made = false;
        int r;

        if (strchr(name, '/') || strlen(boot_id) >= sizeof l->boot_id)
                return -EINVAL;
        l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        pthread_mutex_init(&l->lock, NULL);
        l->fd = -1;
        l->next_seq = 1;
        memcpy(l->boot_id, boot_id, strlen(boot_id)); /* NUL-padded: calloc */
        for (int attempt = 0; attempt < 2; attempt++) {
                l->fd = openat(dir_fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
                if (l->fd >= 0 && fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == LOG_SIZE)
                        break;
                if (l->fd < 0 && errno != ENOENT)
                        return -errno;
                if (l->fd >= 0)
                        close(l->fd);
                l->fd = -1;
                if (attempt > 0)
                        return -EIO;
                /* Missing, or not what this build writes: made anew (an older
                 * log of another size was replayed by the build that wrote it
                 * before it stopped, or holds nothing this one can read). */
                r = make_log(dir_fd, name);
                if (r < 0)
                        return r;
                made = true;
        }
        *ret = TAKE_PTR(l);
        return made;
}

IntentLog *intent_log_free(IntentLog *l) {
        if (!l)
                return NULL;
        if (l->fd >= 0)
                close(l->fd);
        pthread_mutex_destroy(&l->lock);
        free(l);
        return NULL;
}

/* The header of a slot whose checksum holds, or NULL. */
static const SlotHeader *valid_slot(const uint8_t *slot) {
        const SlotHeader *h = (const SlotHeader *) slot;
        uint8_t sum[32];

        if (memcmp(h->magic, MAGIC, sizeof h->magic) != 0 || h->version != VERSION || h->path_len == 0 ||
            h->path_len > ROOM || h->data_len > ROOM - h->path_len)
                return NULL;
        if (checksum(slot, sizeof *h + h->path_len + h->data_len, sum) < 0 || memcmp(sum, h->sha256, 32) != 0)
                return NULL;
        return h;
}

static int by_seq(const void *a, const void *b) {
        const SlotHeader *x = *(const SlotHeader *const *) a, *y = *(const SlotHeader *const *) b;
        return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int intent_log_replay(IntentLog *l, intent_log_replay_fn fn, void *userdata) {
        _cleanup_free_ uint8_t *all = malloc(LOG_SIZE);
        const SlotHeader *found[INTENT_LOG_SLOTS];
        size_t n = 0, handed = 0;
        int r;

        if (!all)
                return -ENOMEM;
        r = loop_pread(l->fd, all, LOG_SIZE, 0);
        if (r < 0)
                return r;
        pthread_mutex_lock(&l->lock);
        for (size_t i = 0; i < INTENT_LOG_SLOTS; i++) {
                const SlotHeader *h = valid_slot(all + (size_t) i * INTENT_LOG_SLOT_SIZE);
                if (!h)
                        continue;
                found[n++] = h;
                /* Live until intent_log_clear(): only these are cleared. */
                if (!l->live[i]) {
                        l->live[i] = true;
                        l->n_live++;
                }
        }
        pthread_mutex_unlock(&l->lock);
        qsort(found, n, sizeof *found, by_seq);
        for (size_t i = 0; i < n; i++) {
                const char *path = (const char *) (found[i] + 1);
                _cleanup_free_ char *relpath = strndup(path, found[i]->path_len);
                bool newer = false;

                if (!relpath)
                        return -ENOMEM;
                if (found[i]->seq >= l->next_seq)
                        l->next_seq = found[i]->seq + 1;
                /* Only the newest slot of a path: an older one is what it held before. */
                for (size_t j = i + 1; j < n && !newer; j++)
                        newer = found[j]->path_len == found[i]->path_len &&
                                memcmp(found[j] + 1, path, found[i]->path_len) == 0;
                /* Written in this boot: the page cache still holds every
                 * write made since, ours and anyone's; only a reboot (a power
                 * loss among them) can have lost a record. */
                if (newer || memchr(path, '\0', found[i]->path_len) ||
                    strncmp(found[i]->boot_id, l->boot_id, sizeof l->boot_id) == 0)
                        continue;
                r = fn(relpath, path + found[i]->path_len, found[i]->data_len, (mode_t) found[i]->mode, userdata);
                if (r < 0)
                        return r;
                handed++;
        }
        return (int) handed;
}

int intent_log_clear(IntentLog *l) {
        uint32_t live[INTENT_LOG_SLOTS];
        size_t n = 0;
        bool broken;

        /* The live slots' headers, not the whole log: after a clean stop
         * there are none, and a start writes nothing. */
        pthread_mutex_lock(&l->lock);
        for (uint32_t i = 0; i < INTENT_LOG_SLOTS; i++)
                if (l->live[i])
                        live[n++] = i;
        pthread_mutex_unlock(&l->lock);
        if (n == 0)
                return 0;
        intent_log_release(l, live, n);
        pthread_mutex_lock(&l->lock);
        broken = l->broken;
        pthread_mutex_unlock(&l->lock);
        if (broken)
                return -EIO;
        return intent_log_sync(l);
}

int intent_log_put(IntentLog *l, const char *relpath, const void *data, size_t size, mode_t mode) {
        SlotHeader *h = (SlotHeader *) l->slot;
        size_t path_len = strlen(relpath), end, index = SIZE_MAX;
        int r;

        if (path_len == 0 || path_len > ROOM || size > ROOM - path_len)
                return -E2BIG;
        pthread_mutex_lock(&l->lock);
        for (size_t i = 0; i < INTENT_LOG_SLOTS && index == SIZE_MAX && !l->broken; i++)
                if (!l->live[i])
                        index = i;
        if (index != SIZE_MAX) {
                l->live[index] = true;
                l->n_live++;
                *h = (SlotHeader){ .version = VERSION, .mode = (uint32_t) mode, .seq = l->next_seq++,
                                   .path_len = (uint32_t) path_len, .data_len = (uint32_t) size };
                memcpy(h->boot_id, l->boot_id, sizeof h->boot_id);
        }
        pthread_mutex_unlock(&l->lock);
        if (index == SIZE_MAX)
                return -ENOSPC;
        memcpy(h->magic, MAGIC, sizeof h->magic);
        memcpy(l->slot + sizeof *h, relpath, path_len);
        memcpy(l->slot + sizeof *h + path_len, data, size);
        end = sizeof *h + path_len + size;
        r = checksum(l->slot, end, h->sha256);
        if (r >= 0)
                r = loop_pwrite(l->fd, l->slot, end, (off_t) index * INTENT_LOG_SLOT_SIZE);
        if (r < 0) {
                intent_log_release(l, &(uint32_t){ index }, 1);
                return r;
        }
        pthread_mutex_lock(&l->lock);
        l->n_written++;
        pthread_mutex_unlock(&l->lock);
        return (int) index;
}

int intent_log_sync(IntentLog *l) {
        uint64_t covers;

        pthread_mutex_lock(&l->lock);
        covers = l->n_written;
        if (l->n_synced >= covers) {
                pthread_mutex_unlock(&l->lock);
                return 0;
        }
        l->n_fdatasyncs++;
        pthread_mutex_unlock(&l->lock);
        /* Every write counted in covers returned before this call began. */
        if (fdatasync(l->fd) < 0)
                return -errno;
        pthread_mutex_lock(&l->lock);
        l->n_synced = MAX(l->n_synced, covers);
        pthread_mutex_unlock(&l->lock);
        return 0;
}

bool intent_log_durable(IntentLog *l) {
        bool durable;

        pthread_mutex_lock(&l->lock);
        durable = l->n_synced >= l->n_written;
        pthread_mutex_unlock(&l->lock);
        return durable;
}

void intent_log_release(IntentLog *l, const uint32_t *slots, size_t n) {
        static const char no_magic[sizeof((SlotHeader *) 0)->magic] = {};

        for (size_t i = 0; i < n; i++) {
                bool freed;

                if (slots[i] >= INTENT_LOG_SLOTS)
                        continue;
                /* The magic alone: the slot no longer parses. */
                freed = loop_pwrite(l->fd, no_magic, sizeof no_magic, (off_t) slots[i] * INTENT_LOG_SLOT_SIZE) >= 0;
                pthread_mutex_lock(&l->lock);
                /* A slot that stays could outlive a newer one of its path, once
                 * that one is freed: no slot is handed out any more, every
                 * record is made durable by itself (the rule before the log). */
                if (!freed)
                        l->broken = true;
                else {
                        l->n_written++;
                        if (l->live[slots[i]]) {
                                l->live[slots[i]] = false;
                                l->n_live--;
                        }
                }
                pthread_mutex_unlock(&l->lock);
        }
}

IntentLogCounts intent_log_counts(IntentLog *l) {
        IntentLogCounts c;

        pthread_mutex_lock(&l->lock);
        c = (IntentLogCounts){ .live = l->n_live, .fdatasyncs = l->n_fdatasyncs };
        pthread_mutex_unlock(&l->lock);
        return c;
}
