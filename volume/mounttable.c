/* SPDX-License-Identifier: Apache-2.0 */
#include <libmount.h>

#include "systemd/log.h"
#include "volume/mounttable.h"

struct MountTable {
        sd_event *event;
        char *root_dir;
        size_t root_len;
        struct libmnt_monitor *monitor;
        sd_event_source *monitor_source;
        sd_event_source *refresh_timer;
        mount_table_changed_t changed;
        void *userdata;
        MountEntry *entries; /* sorted by target, unique */
        size_t n_entries;
};

static int cmp_entry(const void *a, const void *b) {
        const MountEntry *x = a, *y = b;
        int c = strcmp(x->target, y->target);
        /* Stacked mounts: the later one (higher mount id) is what the path shows. */
        return c != 0 ? c : (x->id > y->id) - (x->id < y->id);
}

static void free_entries(MountEntry *entries, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(entries[i].target);
        free(entries);
}

static bool under_root(MountTable *t, const char *target) {
        return strncmp(target, t->root_dir, t->root_len) == 0 && target[t->root_len] == '/';
}

int mount_table_refresh(MountTable *t) {
        struct libmnt_table *tb = mnt_new_table();
        struct libmnt_iter *it = mnt_new_iter(MNT_ITER_FORWARD);
        struct libmnt_fs *fs;
        MountEntry *entries = NULL;
        size_t n = 0, allocated = 0;
        int r;

        if (!tb || !it) {
                r = -ENOMEM;
                goto out;
        }
        r = mnt_table_parse_file(tb, "/proc/self/mountinfo");
        if (r < 0) {
                log_warning_errno(r, "Failed to read /proc/self/mountinfo: %m");
                goto out;
        }
        while (mnt_table_next_fs(tb, it, &fs) == 0) {
                const char *target = mnt_fs_get_target(fs);
                if (!target || !under_root(t, target))
                        continue;
                if (n == allocated) {
                        size_t want = allocated ? 2 * allocated : 64;
                        MountEntry *ne = reallocarray(entries, want, sizeof *ne);
                        if (!ne) {
                                r = -ENOMEM;
                                goto out;
                        }
                        entries = ne;
                        allocated = want;
                }
                entries[n] = (MountEntry){ .target = strdup(target),
                                           .devno = mnt_fs_get_devno(fs),
                                           .id = mnt_fs_get_id(fs) };
                if (!entries[n].target) {
                        r = -ENOMEM;
                        goto out;
                }
                n++;
        }
        if (n > 0)
                qsort(entries, n, sizeof *entries, cmp_entry);
        /* Stacked mounts on one target count once: the top one. */
        size_t unique = 0;
        for (size_t i = 0; i < n; i++) {
                if (unique > 0 && streq(entries[unique - 1].target, entries[i].target)) {
                        free(entries[unique - 1].target);
                        entries[unique - 1] = entries[i];
                        continue;
                }
                entries[unique++] = entries[i];
        }
        free_entries(t->entries, t->n_entries);
        t->entries = TAKE_PTR(entries);
        t->n_entries = unique;
        n = 0;
        r = 0;
out:
        free_entries(entries, n);
        mnt_free_iter(it);
        mnt_unref_table(tb);
        return r;
}

static int on_refresh_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        MountTable *t = userdata;
        if (mount_table_refresh(t) >= 0 && t->changed)
                t->changed(t, t->userdata);
        return 0;
}

static int on_monitor(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        MountTable *t = userdata;
        const char *filename;
        int type, enabled = SD_EVENT_OFF;
        bool changed = false;

        /* next_change() reads the pending events itself (and so drains the fd). */
        while (mnt_monitor_next_change(t->monitor, &filename, &type) == 0)
                changed = true;
        if (!changed)
                return 0;
        (void) sd_event_source_get_enabled(t->refresh_timer, &enabled);
        if (enabled != SD_EVENT_OFF)
                return 0; /* a read is already due */
        (void) sd_event_source_set_time_relative(t->refresh_timer, MOUNT_TABLE_REFRESH_USEC);
        (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_ONESHOT);
        return 0;
}

int mount_table_new(sd_event *event, const char *root_dir, mount_table_changed_t changed, void *userdata,
                    MountTable **ret) {
        _cleanup_(mount_table_freep) MountTable *t = NULL;
        int fd, r;

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->root_dir = strdup(root_dir);
        if (!t->root_dir)
                return -ENOMEM;
        t->root_len = strlen(root_dir);
        t->changed = changed;
        t->userdata = userdata;

        if (event) {
                t->event = sd_event_ref(event);
                t->monitor = mnt_new_monitor();
                if (!t->monitor)
                        return -ENOMEM;
                r = mnt_monitor_enable_kernel(t->monitor, 1);
                if (r < 0)
                        return log_error_errno(r, "Failed to monitor the mount table: %m");
                fd = mnt_monitor_get_fd(t->monitor);
                if (fd < 0)
                        return log_error_errno(fd, "Failed to monitor the mount table: %m");
                r = sd_event_add_io(event, &t->monitor_source, fd, EPOLLIN, on_monitor, t);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch the mount table monitor: %m");
                (void) sd_event_source_set_description(t->monitor_source, "mount-table");
                r = sd_event_add_time(event, &t->refresh_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC,
                                      on_refresh_timer, t);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_OFF);
        }
        r = mount_table_refresh(t);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(t);
        return 0;
}

MountTable *mount_table_free(MountTable *t) {
        if (!t)
                return NULL;
        sd_event_source_disable_unref(t->monitor_source);
        sd_event_source_disable_unref(t->refresh_timer);
        mnt_unref_monitor(t->monitor);
        sd_event_unref(t->event);
        free_entries(t->entries, t->n_entries);
        free(t->root_dir);
        free(t);
        return NULL;
}

static const MountEntry *find_entry(MountTable *t, const char *abs_path) {
        size_t lo = 0, hi = t->n_entries;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(abs_path, t->entries[mid].target);
                if (c == 0)
                        return &t->entries[mid];
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return NULL;
}

bool mount_table_is_mounted(MountTable *t, const char *abs_path) {
        return find_entry(t, abs_path) != NULL;
}

const MountEntry *mount_table_get(MountTable *t, const char *abs_path) {
        return find_entry(t, abs_path);
}

size_t mount_table_other_mounts(MountTable *t, const char *abs_path, const char **ret, size_t max) {
        const MountEntry *e = find_entry(t, abs_path);
        size_t n = 0;

        if (!e)
                return 0;
        for (size_t i = 0; i < t->n_entries; i++) {
                if (&t->entries[i] == e || t->entries[i].devno != e->devno)
                        continue;
                if (n < max)
                        ret[n] = t->entries[i].target;
                n++;
        }
        return n;
}

size_t mount_table_count(MountTable *t) {
        return t->n_entries;
}

const char *mount_table_target(MountTable *t, size_t i) {
        return i < t->n_entries ? t->entries[i].target : NULL;
}
