/* SPDX-License-Identifier: Apache-2.0 */
/* The usage of emptyDir volumes (emptydir-usage.h).  kubelet measures a
 * disk emptyDir with du (pkg/volume/util/fs.DiskUsage) and a tmpfs one
 * with statfs, both at most once per its housekeeping period; this does
 * the same, its period being the CSI volume stats' one. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "systemd/log.h"
#include "volume/host/beneath.h"
#include "volume/host/offloop.h"
#include "volume/internal.h"
#include "volume/kinds/emptydir-usage.h"

/* Deeper directories are not walked (each level holds a descriptor): the
 * measure is then a lower bound, said in the log once per walk. */
#define WALK_DEPTH_MAX 256
/* An entry not asked for this long (its volume is gone) is dropped. */
#define ENTRY_IDLE_USEC (10 * USEC_PER_MINUTE)

typedef struct Entry Entry;
typedef struct Walk Walk;
struct Entry {
        Entry *next;
        char *unique_name;
        uint64_t used;
        uint64_t measured_at;    /* CLOCK_REALTIME; 0: never */
        uint64_t measured_mono;  /* CLOCK_MONOTONIC of the walk's start */
        uint64_t asked_mono;     /* CLOCK_MONOTONIC of the last /volumes that showed it */
        OffloopJob *job;         /* the walk in flight */
        Walk *walk;              /* its data, the job's to free */
};

static struct {
        VolumeManager *m;
        uint64_t interval_usec;
        Entry *entries;
} usage;

struct Walk {
        int root_fd;
        char *target;   /* relative to root-dir */
        uint64_t used;
        bool too_deep;
};

static void walk_free(void *p) {
        Walk *w = p;

        if (!w)
                return;
        if (w->root_fd >= 0)
                close(w->root_fd);
        free(w->target);
        free(w);
}

static void walk_freep(Walk **w) {
        walk_free(*w);
}

static bool mount_root(const struct statx *sx) {
        return (sx->stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (sx->stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* du's count of what is in dfd: st_blocks * 512 of every entry, by
 * descriptor, never through a symlink (its own blocks count, not its
 * target's) nor into another mount.  A file with several links in the
 * volume counts each time (du counts it once). */
static int walk_dir(Walk *w, int dfd, unsigned depth) {
        DIR *d;
        int r;

        if (depth > WALK_DEPTH_MAX) {
                w->too_deep = true;
                return 0;
        }
        r = dir_list_open(dfd, &d);
        if (r < 0)
                return r;
        for (struct dirent *de; (errno = 0, de = readdir(d));) {
                struct statx sx;
                int child;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                /* Gone meanwhile, or not ours to read: the pod's business. */
                if (statx(dfd, de->d_name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE | STATX_BLOCKS, &sx) < 0)
                        continue;
                if (mount_root(&sx))
                        continue;
                w->used += sx.stx_blocks * 512;
                if (!S_ISDIR(sx.stx_mode))
                        continue;
                child = openat(dfd, de->d_name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        continue;
                (void) walk_dir(w, child, depth + 1);
                close(child);
        }
        closedir(d);
        return 0;
}

static int walk_work(void *p, char **ret_error) {
        Walk *w = p;
        _cleanup_close_ int fd = -1;
        struct stat st;

        /* root-dir's own path down to the volume: kvolumed's directories. */
        fd = openat(w->root_fd, w->target, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0)
                return asprintf(ret_error, "cannot open %s: %s", w->target, strerror(errno)) < 0 ? -ENOMEM : -errno;
        w->used = (uint64_t) st.st_blocks * 512;
        return walk_dir(w, fd, 0);
}

static Entry *entry_find(const char *unique_name) {
        for (Entry *e = usage.entries; e; e = e->next)
                if (streq(e->unique_name, unique_name))
                        return e;
        return NULL;
}

static void entry_free(Entry *e) {
        offloop_free(e->job);
        free(e->unique_name);
        free(e);
}

static void walk_done(OffloopJob *j, int result, char *error, void *userdata) {
        Entry *e = userdata;
        Walk *w = e->walk;
        uint64_t now = 0;

        if (result < 0)
                log_warning_errno(result, "Failed to measure the usage of emptyDir %s: %s; tried again after "
                                  "[csi] stats-interval", e->unique_name, error ?: "see above");
        else {
                if (w->too_deep)
                        log_warning("emptyDir %s is nested deeper than %u directories: its usage counts only "
                                    "what is above", e->unique_name, WALK_DEPTH_MAX);
                (void) sd_event_now(usage.m->event, CLOCK_REALTIME, &now);
                e->used = w->used;
                e->measured_at = now;
        }
        free(error);
        e->walk = NULL;
        e->job = offloop_free(e->job);
}

/* The walk is due: none yet, or the last began an interval ago. */
static void maybe_walk(Entry *e, const char *target, uint64_t now) {
        _cleanup_(walk_freep) Walk *w = NULL;
        int r;

        if (e->job || usage.interval_usec == 0 || (e->measured_mono != 0 && now < e->measured_mono + usage.interval_usec))
                return;
        w = calloc(1, sizeof *w);
        if (!w)
                return;
        w->root_fd = fcntl(usage.m->root->fd, F_DUPFD_CLOEXEC, 3);
        if (w->root_fd < 0 || !(w->target = strdup(target)))
                return;
        r = offloop_start(usage.m->event, "emptydir-usage", walk_work, w, walk_free, walk_done, e, &e->job);
        if (r < 0) {
                log_warning_errno(r, "Failed to start measuring emptyDir %s: %m", e->unique_name);
                return;
        }
        e->walk = TAKE_PTR(w);
        e->measured_mono = now;
}

static void prune(uint64_t now) {
        for (Entry **p = &usage.entries; *p;) {
                Entry *e = *p;

                if (now > e->asked_mono + ENTRY_IDLE_USEC) {
                        *p = e->next;
                        entry_free(e);
                } else
                        p = &e->next;
        }
}

static cJSON *realtime_json(uint64_t usec) {
        char buf[64], date[40];
        time_t sec = (time_t) (usec / USEC_PER_SEC);
        struct tm tm;

        if (usec == 0 || !gmtime_r(&sec, &tm) || strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
                return cJSON_CreateNull();
        snprintf(buf, sizeof buf, "%s.%03uZ", date, (unsigned) (usec % USEC_PER_SEC / 1000));
        return cJSON_CreateString(buf);
}

int emptydir_usage_describe(const ActualVolume *av, cJSON *into) {
        _cleanup_free_ char *abs = NULL;
        const ActualPublish *p = NULL;
        uint64_t now = 0, realtime = 0;
        struct statx sx;
        struct statfs sf;
        cJSON *u;
        Entry *e;

        u = cJSON_AddObjectToObject(into, "usage");
        if (!u)
                return -ENOMEM;
        /* One pod's: its one publish, once set up. */
        for (size_t i = 0; av->publishes && hashmap_iterate(av->publishes, &i, NULL, (void **) &p);)
                break;
        if (!usage.m || !p || p->state != PUBLISH_DONE || !p->target ||
            asprintf(&abs, "%s/%s", usage.m->root->path, p->target) < 0) {
                cJSON_AddNullToObject(u, "usedBytes");
                cJSON_AddNullToObject(u, "capacityBytes");
                cJSON_AddNullToObject(u, "measuredAt");
                return 0;
        }
        (void) sd_event_now(usage.m->event, CLOCK_MONOTONIC, &now);
        (void) sd_event_now(usage.m->event, CLOCK_REALTIME, &realtime);
        /* medium: Memory, its tmpfs mounted: the tmpfs's own count. */
        if (statx(AT_FDCWD, abs, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE, &sx) >= 0 && mount_root(&sx) &&
            statfs(abs, &sf) >= 0 && sf.f_type == TMPFS_MAGIC) {
                cJSON_AddNumberToObject(u, "usedBytes", (double) ((sf.f_blocks - sf.f_bfree) * sf.f_bsize));
                cJSON_AddNumberToObject(u, "capacityBytes", (double) (sf.f_blocks * sf.f_bsize));
                cJSON_AddItemToObject(u, "measuredAt", realtime_json(realtime));
                return 0;
        }
        prune(now);
        e = entry_find(av->unique_name);
        if (!e) {
                e = calloc(1, sizeof *e);
                if (!e || !(e->unique_name = strdup(av->unique_name))) {
                        free(e);
                        return -ENOMEM;
                }
                e->next = usage.entries;
                usage.entries = e;
        }
        e->asked_mono = now;
        maybe_walk(e, p->target, now);
        if (e->measured_at != 0)
                cJSON_AddNumberToObject(u, "usedBytes", (double) e->used);
        else
                cJSON_AddNullToObject(u, "usedBytes");
        cJSON_AddNullToObject(u, "capacityBytes");
        cJSON_AddItemToObject(u, "measuredAt", realtime_json(e->measured_at));
        return 0;
}

int emptydir_usage_setup(VolumeManager *m) {
        usage.m = m;
        return 0;
}

void emptydir_usage_free(VolumeManager *m) {
        if (usage.m != m)
                return;
        while (usage.entries) {
                Entry *e = usage.entries;

                usage.entries = e->next;
                entry_free(e);
        }
        usage.m = NULL;
}

void emptydir_usage_set_interval(uint64_t interval_usec) {
        usage.interval_usec = interval_usec;
}
