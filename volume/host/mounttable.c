/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <inttypes.h>
#include <libmount.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/host/mountkernel.h"
#include "volume/host/mounttable.h"

struct MountTable {
        sd_event *event;
        char *root_dir;
        size_t root_len;
        /* The kernel path: mount events on fan_fd, statmount for each. */
        bool kernel;
        int fan_fd;
        sd_event_source *fan_source;
        StatmountBuffer statbuf;
        bool reload; /* events were lost: list every mount again */
        bool changed_since_notify; /* a mount under root-dir came or went */
        /* The targets whose mounts changed since the owner was last told
         * (target → non-NULL), for it to look at those only; touched_all:
         * out of memory, some may be missing. */
        Hashmap *touched;
        bool touched_all;
        /* The mountinfo path: libmount's monitor says when to read again. */
        struct libmnt_monitor *monitor;
        sd_event_source *monitor_source;
        /* Tells the owner: refresh_timer at idle priority, deadline_timer at
         * normal priority for when the loop is never idle. */
        sd_event_source *refresh_timer;
        sd_event_source *deadline_timer;
        mount_table_changed_t changed;
        void *userdata;
        /* Sorted by target, then mount ID: mounts stacked on one target are
         * all kept, the top one (highest ID) last.  A file system hidden
         * under another mount is still mounted there, and still a reference
         * to it (a bind of a staged volume under whatever came on top). */
        MountEntry *entries;
        size_t n_entries, allocated;
        size_t n_targets;    /* distinct targets */
};

static int cmp_entry(const void *a, const void *b) {
        const MountEntry *x = a, *y = b;
        int c = strcmp(x->target, y->target);
        /* Stacked mounts: the later one is what the path shows. */
        return c != 0 ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static void free_entries(MountEntry *entries, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(entries[i].target);
        free(entries);
}

static bool under_root(MountTable *t, const char *target) {
        return strncmp(target, t->root_dir, t->root_len) == 0 && target[t->root_len] == '/';
}

static void note_touched(MountTable *t, const char *target) {
        if (!t->changed)
                return; /* nobody to tell */
        if (!t->touched || hashmap_put(t->touched, target, t, NULL) < 0)
                t->touched_all = true;
}

static void touched_reset(MountTable *t) {
        const char *key;
        for (size_t i = 0; t->touched && hashmap_iterate(t->touched, &i, &key, NULL);)
                (void) hashmap_remove(t->touched, key);
        t->touched_all = false;
}

/* The end of the run of entries of one target that starts at i. */
static size_t target_end(const MountEntry *e, size_t n, size_t i) {
        size_t j = i + 1;
        while (j < n && streq(e[j].target, e[i].target))
                j++;
        return j;
}

/* Notes the targets whose layers differ between two sorted tables: those
 * in one only, and those whose mounts (ID and device, bottom to top)
 * changed.  Not seq: a mountinfo line's index moves with every line above. */
static void diff_entries(MountTable *t, const MountEntry *old, size_t n_old, const MountEntry *new, size_t n_new) {
        size_t i = 0, j = 0;

        while (i < n_old || j < n_new) {
                int c = i == n_old ? 1 : j == n_new ? -1 : strcmp(old[i].target, new[j].target);
                size_t ie = i < n_old ? target_end(old, n_old, i) : i;
                size_t je = j < n_new ? target_end(new, n_new, j) : j;

                if (c < 0) {
                        note_touched(t, old[i].target);
                        i = ie;
                        continue;
                }
                if (c > 0) {
                        note_touched(t, new[j].target);
                        j = je;
                        continue;
                }
                bool same = ie - i == je - j;
                for (size_t k = 0; same && k < ie - i; k++)
                        same = old[i + k].id == new[j + k].id && old[i + k].devno == new[j + k].devno;
                if (!same)
                        note_touched(t, old[i].target);
                i = ie;
                j = je;
        }
}

static void arm_notify(MountTable *t, uint64_t usec);

/* Takes entries (unsorted) as the whole table. */
static void replace_entries(MountTable *t, MountEntry *entries, size_t n) {
        size_t targets = 0;

        if (n > 0)
                qsort(entries, n, sizeof *entries, cmp_entry);
        diff_entries(t, t->entries, t->n_entries, entries, n);
        for (size_t i = 0; i < n; i++)
                targets += i == 0 || !streq(entries[i - 1].target, entries[i].target);
        free_entries(t->entries, t->n_entries);
        t->entries = entries;
        t->n_entries = n;
        t->allocated = n;
        t->n_targets = targets;
}

/* A decimal number that is all of [s, s+len): the fields are not
 * NUL-terminated, so no sscanf (which would also look for the NUL first). */
static int parse_decimal(const char *s, size_t len, uint64_t *ret) {
        uint64_t v = 0;

        if (len == 0 || len > 19)
                return -EBADMSG;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EBADMSG;
                v = v * 10 + (uint64_t) (s[i] - '0');
        }
        *ret = v;
        return 0;
}

int mountinfo_parse_line(const char *line, size_t len, int *ret_id, dev_t *ret_devno, char **ret_target) {
        const char *p = line, *end = line + len, *field[5];
        size_t field_len[5];
        uint64_t id_value, major, minor;
        const char *colon;
        char *target, *w;
        int id;

        /* "36 35 98:0 /root /mount/point options ...": the first five fields. */
        for (size_t i = 0; i < 5; i++) {
                const char *sp;
                if (p >= end)
                        return -EBADMSG;
                sp = memchr(p, ' ', end - p);
                field[i] = p;
                field_len[i] = (sp ? sp : end) - p;
                if (field_len[i] == 0)
                        return -EBADMSG;
                p = sp ? sp + 1 : end;
        }
        colon = memchr(field[2], ':', field_len[2]);
        if (!colon || parse_decimal(field[0], field_len[0], &id_value) < 0 ||
            parse_decimal(field[2], colon - field[2], &major) < 0 ||
            parse_decimal(colon + 1, field[2] + field_len[2] - colon - 1, &minor) < 0 || id_value > INT_MAX ||
            major > UINT32_MAX || minor > UINT32_MAX)
                return -EBADMSG;
        id = (int) id_value;
        target = malloc(field_len[4] + 1);
        if (!target)
                return -ENOMEM;
        /* The kernel writes space, tab, newline and backslash as \ooo. */
        w = target;
        for (const char *c = field[4], *fend = field[4] + field_len[4]; c < fend; c++) {
                if (*c == '\\' && c + 3 < fend && c[1] >= '0' && c[1] <= '3' &&
                    c[2] >= '0' && c[2] <= '7' && c[3] >= '0' && c[3] <= '7') {
                        *w++ = (char) ((c[1] - '0') << 6 | (c[2] - '0') << 3 | (c[3] - '0'));
                        c += 3;
                } else
                        *w++ = *c;
        }
        *w = '\0';
        if (strlen(target) != (size_t) (w - target)) { /* an escaped NUL: nothing the kernel writes */
                free(target);
                return -EBADMSG;
        }
        *ret_id = id;
        *ret_devno = makedev(major, minor);
        *ret_target = target;
        return 0;
}

/* All of /proc/self/mountinfo in one buffer: seq_file answers in pages. */
static int read_mountinfo(char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, size = 0;
        int fd;

        fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (;;) {
                ssize_t k;
                if (size - len < 4096) {
                        size_t want = size ? 2 * size : 64 * 1024;
                        char *nb = realloc(buf, want);
                        if (!nb) {
                                close(fd);
                                return -ENOMEM;
                        }
                        buf = nb;
                        size = want;
                }
                k = read(fd, buf + len, size - len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        k = -errno;
                        close(fd);
                        return (int) k;
                }
                if (k == 0)
                        break;
                len += (size_t) k;
        }
        close(fd);
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

/* Reads the table again.  Not through libmount's parser: with a thousand
 * volumes mounted, its full parse of every line (a dozen allocations each)
 * was a fifth of kvolumed's CPU time while pods came and went one by one;
 * only three fields of the lines under root-dir are needed here. */
static int mountinfo_refresh(MountTable *t) {
        _cleanup_free_ char *text = NULL;
        MountEntry *entries = NULL;
        size_t n = 0, allocated = 0, len = 0;
        int r;

        r = read_mountinfo(&text, &len);
        if (r < 0) {
                log_warning_errno(r, "Failed to read /proc/self/mountinfo: %m");
                return r;
        }
        uint64_t line_no = 0;
        for (const char *line = text, *end = text + len; line < end; line_no++) {
                const char *nl = memchr(line, '\n', end - line);
                size_t line_len = (nl ? nl : end) - line;
                char *target = NULL;
                dev_t devno;
                int id;

                r = mountinfo_parse_line(line, line_len, &id, &devno, &target);
                line = nl ? nl + 1 : end;
                if (r == -ENOMEM)
                        goto out;
                if (r < 0 || !under_root(t, target)) {
                        free(target);
                        continue;
                }
                if (n == allocated) {
                        size_t want = allocated ? 2 * allocated : 64;
                        MountEntry *ne = reallocarray(entries, want, sizeof *ne);
                        if (!ne) {
                                free(target);
                                r = -ENOMEM;
                                goto out;
                        }
                        entries = ne;
                        allocated = want;
                }
                entries[n++] = (MountEntry){ .target = target, .devno = devno, .id = id, .seq = line_no };
        }
        replace_entries(t, TAKE_PTR(entries), n);
        n = 0;
        r = 0;
        /* A read for a caller of its own (the unstage guard) may have found
         * what the monitor's news would: the owner hears of it all the same. */
        if (t->touched_all || hashmap_size(t->touched) > 0)
                arm_notify(t, MOUNT_TABLE_REFRESH_USEC);
out:
        free_entries(entries, n);
        return r;
}

/* The kernel path. */

static void entry_remove_at(MountTable *t, size_t i) {
        const char *target = t->entries[i].target;
        bool shared = (i > 0 && streq(t->entries[i - 1].target, target)) ||
                      (i + 1 < t->n_entries && streq(t->entries[i + 1].target, target));

        note_touched(t, target);
        free(t->entries[i].target);
        memmove(&t->entries[i], &t->entries[i + 1], (t->n_entries - i - 1) * sizeof *t->entries);
        t->n_entries--;
        if (!shared)
                t->n_targets--;
}

static int entry_insert(MountTable *t, MountEntry e) {
        size_t lo = 0, hi = t->n_entries;
        bool shared;

        if (t->n_entries == t->allocated) {
                size_t want = t->allocated ? 2 * t->allocated : 64;
                MountEntry *ne = reallocarray(t->entries, want, sizeof *ne);
                if (!ne)
                        return -ENOMEM;
                t->entries = ne;
                t->allocated = want;
        }
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (cmp_entry(&t->entries[mid], &e) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        shared = (lo > 0 && streq(t->entries[lo - 1].target, e.target)) ||
                 (lo < t->n_entries && streq(t->entries[lo].target, e.target));
        memmove(&t->entries[lo + 1], &t->entries[lo], (t->n_entries - lo) * sizeof *t->entries);
        t->entries[lo] = e;
        t->n_entries++;
        note_touched(t, e.target);
        if (!shared)
                t->n_targets++;
        return 0;
}

/* Drops the mount mnt_id (seq holds it on this path); whether it was held. */
static bool kernel_forget(MountTable *t, uint64_t mnt_id) {
        for (size_t i = 0; i < t->n_entries; i++)
                if (t->entries[i].seq == mnt_id) {
                        entry_remove_at(t, i);
                        return true;
                }
        return false;
}

/* Asks the kernel what mount mnt_id is: 1 and *ret when it is under
 * root-dir, 0 when not or gone already. */
static int kernel_stat(MountTable *t, uint64_t mnt_id, MountEntry *ret) {
        const char *target;
        dev_t devno;
        int old_id, r;

        r = mount_stat(&t->statbuf, mnt_id, &target, &devno, &old_id);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        if (!under_root(t, target))
                return 0;
        *ret = (MountEntry){ .target = strdup(target), .devno = devno, .id = old_id, .seq = mnt_id };
        return ret->target ? 1 : -ENOMEM;
}

/* Every mount of the namespace, listed and asked one by one: at start, and
 * after lost events.  The mark is set before, so a change during the
 * listing is also queued, and applying it again changes nothing. */
static int kernel_load(MountTable *t) {
        _cleanup_free_ uint64_t *ids = NULL;
        MountEntry *entries = NULL;
        size_t n_ids = 0, n = 0;
        int r;

        r = mount_list_all(&ids, &n_ids);
        if (r < 0)
                return log_warning_errno(r, "Failed to list the mounts (listmount): %m");
        entries = n_ids > 0 ? calloc(n_ids, sizeof *entries) : NULL;
        if (n_ids > 0 && !entries)
                return -ENOMEM;
        for (size_t i = 0; i < n_ids; i++) {
                r = kernel_stat(t, ids[i], &entries[n]);
                if (r < 0) {
                        free_entries(entries, n);
                        return log_warning_errno(r, "Failed to read mount %" PRIu64 " (statmount): %m", ids[i]);
                }
                n += r;
        }
        replace_entries(t, entries, n);
        t->allocated = n_ids;
        t->reload = false;
        return 0;
}

static int on_kernel_event(MountEventKind kind, uint64_t mnt_id, void *userdata) {
        MountTable *t = userdata;
        MountEntry e;
        int r = 0;

        if (kind == MOUNT_EVENT_OVERFLOW)
                t->reload = true;
        if (t->reload)
                return 0; /* everything is listed again after this batch */
        /* Detached, or attached: a move reports both, and an ID seen again
         * is looked up again. */
        if (kernel_forget(t, mnt_id))
                t->changed_since_notify = true;
        if (kind == MOUNT_EVENT_ATTACH) {
                r = kernel_stat(t, mnt_id, &e);
                if (r > 0) {
                        r = entry_insert(t, e);
                        if (r < 0)
                                free(e.target);
                        else
                                t->changed_since_notify = true;
                }
                if (r < 0) {
                        log_debug_errno(r, "Failed to read mount %" PRIu64 " (statmount), listing all again: %m",
                                        mnt_id);
                        t->reload = true;
                }
        }
        return 0;
}

static int kernel_refresh(MountTable *t) {
        int r;

        r = mount_events_read(t->fan_fd, on_kernel_event, t);
        if (r < 0) {
                log_warning_errno(r, "Failed to read the mount events, listing all mounts again: %m");
                t->reload = true;
        }
        if (t->reload) {
                r = kernel_load(t);
                if (r < 0)
                        return r;
                t->changed_since_notify = true;
        }
        /* Even a synchronous refresh's news reaches the owner: the events
         * are consumed here, the descriptor will not wake the loop for them. */
        if (t->changed_since_notify)
                arm_notify(t, MOUNT_TABLE_REFRESH_USEC);
        return 0;
}

static int on_mount_events(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        (void) kernel_refresh(userdata);
        return 0;
}

int mount_table_refresh(MountTable *t) {
        return t->kernel ? kernel_refresh(t) : mountinfo_refresh(t);
}

/* Telling the owner. */

static int notify_owner(MountTable *t) {
        (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(t->deadline_timer, SD_EVENT_OFF);
        if (mount_table_refresh(t) < 0)
                return 0;
        /* The refresh may have found more: that is told now, not again. */
        (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(t->deadline_timer, SD_EVENT_OFF);
        t->changed_since_notify = false;
        if (t->changed)
                t->changed(t, t->touched_all ? NULL : t->touched, t->userdata);
        touched_reset(t);
        return 0;
}

static int on_refresh_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        return notify_owner(userdata);
}

static int on_deadline_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        MountTable *t = userdata;
        log_debug("Mount table: the loop was busy for %" PRIu64 " ms, telling the owner now",
                  MOUNT_TABLE_MAX_DELAY_USEC / USEC_PER_MSEC);
        return notify_owner(t);
}

/* The owner is told within usec if the loop has time, and within
 * MOUNT_TABLE_MAX_DELAY_USEC of the first change however busy it is: the
 * idle-priority timer alone waits for an idle loop, which a node with
 * work always coming in may never have. */
static void arm_notify(MountTable *t, uint64_t usec) {
        int enabled = SD_EVENT_OFF;
        uint64_t now = 0, armed = 0;

        if (!t->refresh_timer || sd_event_now(t->event, CLOCK_MONOTONIC, &now) < 0)
                return;
        (void) sd_event_source_get_enabled(t->deadline_timer, &enabled);
        if (enabled == SD_EVENT_OFF) {
                (void) sd_event_source_set_time(t->deadline_timer, now + MAX(usec, MOUNT_TABLE_MAX_DELAY_USEC));
                (void) sd_event_source_set_enabled(t->deadline_timer, SD_EVENT_ONESHOT);
        }
        (void) sd_event_source_get_enabled(t->refresh_timer, &enabled);
        if (enabled != SD_EVENT_OFF && sd_event_source_get_time(t->refresh_timer, &armed) >= 0 &&
            armed <= now + usec)
                return; /* one read for the whole burst */
        (void) sd_event_source_set_time(t->refresh_timer, now + usec);
        (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_ONESHOT);
}

static int on_monitor(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        MountTable *t = userdata;
        const char *filename;
        int type;
        bool changed = false;

        /* next_change() reads the pending events itself (and so drains the fd). */
        while (mnt_monitor_next_change(t->monitor, &filename, &type) == 0)
                changed = true;
        if (changed)
                arm_notify(t, MOUNT_TABLE_REFRESH_USEC);
        return 0;
}

void mount_table_refresh_soon(MountTable *t, uint64_t usec) {
        arm_notify(t, usec);
}

const char *mount_table_source(MountTable *t) {
        return t->kernel ? "kernel" : "mountinfo";
}

/* Chooses the source, logged once. */
static int open_source(MountTable *t, MountSource source) {
        const char *why = NULL;
        int r;

        if (source == MOUNT_SOURCE_MOUNTINFO)
                log_info("Mount table: read from /proc/self/mountinfo (mount-source = mountinfo)");
        else {
                r = mount_events_open(&t->fan_fd, &why);
                if (r >= 0) {
                        t->kernel = true;
                        log_info("Mount table: changes from the kernel (fanotify mount events, statmount, "
                                 "listmount)");
                        return 0;
                }
                log_info("Mount table: read from /proc/self/mountinfo (%s: %s)", why, strerror(-r));
        }
        if (!t->event)
                return 0;
        t->monitor = mnt_new_monitor();
        if (!t->monitor)
                return -ENOMEM;
        r = mnt_monitor_enable_kernel(t->monitor, 1);
        if (r < 0)
                return log_error_errno(r, "Failed to monitor the mount table: %m");
        return 0;
}

int mount_table_new(sd_event *event, const char *root_dir, MountSource source, mount_table_changed_t changed,
                    void *userdata, MountTable **ret) {
        _cleanup_(mount_table_freep) MountTable *t = NULL;
        int fd, r;

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->fan_fd = -EBADF;
        t->root_dir = strdup(root_dir);
        if (!t->root_dir)
                return -ENOMEM;
        t->root_len = strlen(root_dir);
        t->changed = changed;
        t->userdata = userdata;
        t->event = event ? sd_event_ref(event) : NULL;
        t->touched = hashmap_new();
        if (!t->touched)
                return -ENOMEM;

        r = open_source(t, source);
        if (r < 0)
                return r;
        if (event) {
                fd = t->kernel ? t->fan_fd : mnt_monitor_get_fd(t->monitor);
                if (fd < 0)
                        return log_error_errno(fd, "Failed to monitor the mount table: %m");
                r = sd_event_add_io(event, t->kernel ? &t->fan_source : &t->monitor_source, fd, EPOLLIN,
                                    t->kernel ? on_mount_events : on_monitor, t);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch the mount table monitor: %m");
                (void) sd_event_source_set_description(t->kernel ? t->fan_source : t->monitor_source,
                                                       "mount-table");
                /* Cheap (the news read and, on the kernel path, each changed
                 * mount asked about): ahead of the loop's other work, so that
                 * no amount of it can hide a change. */
                (void) sd_event_source_set_priority(t->kernel ? t->fan_source : t->monitor_source,
                                                    SD_EVENT_PRIORITY_IMPORTANT);
                r = sd_event_add_time(event, &t->refresh_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC,
                                      on_refresh_timer, t);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_OFF);
                (void) sd_event_source_set_description(t->refresh_timer, "mount-table-read");
                /* Work that came in (a pod's event) goes first: the read is a check. */
                (void) sd_event_source_set_priority(t->refresh_timer, SD_EVENT_PRIORITY_IDLE);
                /* ... but not forever. */
                r = sd_event_add_time(event, &t->deadline_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC,
                                      on_deadline_timer, t);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_enabled(t->deadline_timer, SD_EVENT_OFF);
                (void) sd_event_source_set_description(t->deadline_timer, "mount-table-deadline");
                /* Ahead of normal work too: sd-event runs an ever-pending
                 * source of equal priority (a deferred pass re-armed at
                 * once) before any that became pending after it. */
                (void) sd_event_source_set_priority(t->deadline_timer, SD_EVENT_PRIORITY_IMPORTANT);
        }
        r = t->kernel ? kernel_load(t) : mountinfo_refresh(t);
        if (r < 0)
                return r;
        /* The first read is the owner's starting point, not a change. */
        touched_reset(t);
        (void) sd_event_source_set_enabled(t->refresh_timer, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(t->deadline_timer, SD_EVENT_OFF);
        *ret = TAKE_PTR(t);
        return 0;
}

MountTable *mount_table_free(MountTable *t) {
        if (!t)
                return NULL;
        sd_event_source_disable_unref(t->monitor_source);
        sd_event_source_disable_unref(t->fan_source);
        sd_event_source_disable_unref(t->refresh_timer);
        sd_event_source_disable_unref(t->deadline_timer);
        mnt_unref_monitor(t->monitor);
        if (t->fan_fd >= 0)
                (void) close(t->fan_fd);
        statmount_buffer_done(&t->statbuf);
        sd_event_unref(t->event);
        free_entries(t->entries, t->n_entries);
        hashmap_free(t->touched);
        free(t->root_dir);
        free(t);
        return NULL;
}

/* The index of the first (lowest) mount at abs_path, or n_entries. */
static size_t find_first(MountTable *t, const char *abs_path) {
        size_t lo = 0, hi = t->n_entries;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(t->entries[mid].target, abs_path) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < t->n_entries && streq(t->entries[lo].target, abs_path) ? lo : t->n_entries;
}

/* The top mount at abs_path: what the path shows. */
static const MountEntry *find_entry(MountTable *t, const char *abs_path) {
        size_t i = find_first(t, abs_path);
        if (i == t->n_entries)
                return NULL;
        while (i + 1 < t->n_entries && streq(t->entries[i + 1].target, abs_path))
                i++;
        return &t->entries[i];
}

bool mount_table_is_mounted(MountTable *t, const char *abs_path) {
        return find_entry(t, abs_path) != NULL;
}

/* The kernel's answer for one path, whatever the table says: 1 the root of
 * a mount, 0 not (or no such path), -errno.  O_PATH: no open of the file
 * system's own (and no revalidation on the wire: that needs an open
 * intent); AT_STATX_DONT_SYNC: attributes as cached (FUSE, NFS, CIFS honour
 * it), the mount-root attribute being the VFS's.  As root_dir_is_mount_point()
 * does, which runs on the loop too. */
static int kernel_is_mount_point(const char *abs_path) {
        _cleanup_close_ int fd = -EBADF;
        struct statx sx;

        fd = open(abs_path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &sx) < 0)
                return -errno;
        if (!(sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
                return -EOPNOTSUPP;
        return !!(sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

int mount_table_mounted(MountTable *t, const char *abs_path) {
        int r;

        /* A mount hidden under one stacked on a directory above it is still
         * there, and only the table knows it: its "yes" stands. */
        if (find_entry(t, abs_path))
                return 1;
        r = kernel_is_mount_point(abs_path);
        if (r < 0)
                return log_warning_errno(r, "Cannot tell whether %s is a mount point (statx): %m; taken for one",
                                         abs_path);
        if (r == 0)
                return 0;
        /* The table is behind: a directory above the mount was renamed
         * since its path was read.  The next read lists everything again,
         * and the owner hears of each mount whose path moved. */
        log_notice("Mount table: %s is a mount point that the table had under another path (a directory "
                   "above it renamed?); reading every mount again",
                   abs_path);
        if (t->kernel)
                t->reload = true;
        arm_notify(t, MOUNT_TABLE_REFRESH_USEC);
        return 1;
}

int mount_table_reload(MountTable *t) {
        if (!t->kernel)
                return mountinfo_refresh(t);
        /* The events queued so far are read and dropped: the listing is newer. */
        t->reload = true;
        return kernel_refresh(t);
}

const MountEntry *mount_table_get(MountTable *t, const char *abs_path) {
        return find_entry(t, abs_path);
}

static bool mounted_at(MountTable *t, size_t first, const char *abs_path, dev_t devno) {
        for (size_t i = first; i < t->n_entries && streq(t->entries[i].target, abs_path); i++)
                if (t->entries[i].devno == devno)
                        return true;
        return false;
}

size_t mount_table_other_mounts(MountTable *t, const char *abs_path, const char **ret, size_t max) {
        size_t first = find_first(t, abs_path), n = 0;
        const char *last = NULL;

        if (first == t->n_entries)
                return 0;
        /* Every layer at abs_path against every layer elsewhere, each other
         * target counted once (its layers are next to each other). */
        for (size_t i = 0; i < t->n_entries; i++) {
                const MountEntry *e = &t->entries[i];
                if (streq(e->target, abs_path) || streq_ptr(last, e->target))
                        continue;
                if (!mounted_at(t, first, abs_path, e->devno))
                        continue;
                if (n < max)
                        ret[n] = e->target;
                last = e->target;
                n++;
        }
        return n;
}

size_t mount_table_count(MountTable *t) {
        return t->n_targets;
}

const char *mount_table_target(MountTable *t, size_t i) {
        for (size_t j = 0; j < t->n_entries; j++) {
                if (j > 0 && streq(t->entries[j - 1].target, t->entries[j].target))
                        continue;
                if (i-- == 0)
                        return t->entries[j].target;
        }
        return NULL;
}
