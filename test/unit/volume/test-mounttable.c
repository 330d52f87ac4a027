/* SPDX-License-Identifier: Apache-2.0 */
/* Runs in a private mount namespace of its own (root needed; skipped otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "test/unit/tmptree.h"
#include "volume/host/mounttable.h"

#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

static char base[] = "/tmp/kvolumed-mounttable-XXXXXX";

/* Every test runs on both sources; on a kernel that has the mount events
 * (6.15+) the kernel variant must really be on them. */
static MountSource current_source = MOUNT_SOURCE_AUTO;

static MountSource source(void) {
        return current_source;
}

/* Linux 6.15 or later, and its calls reach it: valgrind, for one, does not
 * know listmount(2) and answers ENOSYS, and the table must then fall back. */
static bool kernel_has_mount_events(void) {
        struct utsname u;
        unsigned major = 0, minor = 0;
        uint64_t req[4] = { 24, UINT64_MAX, 0, 0 }, id; /* struct mnt_id_req: size, LSMT_ROOT */

        if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2 ||
            !(major > 6 || (major == 6 && minor >= 15)))
                return false;
        return syscall(458 /* listmount */, req, &id, 1, 0) >= 0;
}

static void check_source(MountTable *t) {
        if (current_source == MOUNT_SOURCE_MOUNTINFO)
                assert_string_equal(mount_table_source(t), "mountinfo");
        else if (kernel_has_mount_events())
                assert_string_equal(mount_table_source(t), "kernel");
}
static char root[128], a[160], b[160], outside[160];

static int setup(void **state) {
        if (geteuid() != 0)
                return 0;
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -1;
        assert_non_null(mkdtemp(base));
        snprintf(root, sizeof root, "%s/root", base);
        snprintf(a, sizeof a, "%s/a", root);
        snprintf(b, sizeof b, "%s/b", root);
        snprintf(outside, sizeof outside, "%s/rootless", base); /* shares the prefix, not the dir */
        mkdir(root, 0755);
        mkdir(a, 0755);
        mkdir(b, 0755);
        mkdir(outside, 0755);
        return 0;
}

static int teardown(void **state) {
        if (geteuid() != 0)
                return 0;
        umount2(a, MNT_DETACH);
        umount2(a, MNT_DETACH);
        umount2(b, MNT_DETACH);
        while (umount2(outside, MNT_DETACH) == 0)
                ;
        return tmptree_remove(base) == 0 ? 0 : -1;
}

typedef struct Seen {
        unsigned calls;
        sd_event *event;
        char changed[512]; /* the targets told, sorted, space-separated; "*" for all */
} Seen;

static int cmp_str(const void *x, const void *y) {
        return strcmp(*(const char *const *) x, *(const char *const *) y);
}

static void on_changed(MountTable *t, const Hashmap *changed, void *userdata) {
        Seen *seen = userdata;
        const char *keys[16], *key;
        size_t n = 0;

        seen->calls++;
        seen->changed[0] = '\0';
        if (!changed) {
                strcpy(seen->changed, "*");
                return;
        }
        for (size_t i = 0; n < 16 && hashmap_iterate(changed, &i, &key, NULL);)
                keys[n++] = key;
        qsort(keys, n, sizeof *keys, cmp_str);
        for (size_t i = 0; i < n; i++) {
                strncat(seen->changed, i > 0 ? " " : "", sizeof seen->changed - strlen(seen->changed) - 1);
                strncat(seen->changed, keys[i], sizeof seen->changed - strlen(seen->changed) - 1);
        }
}

static int on_quit(sd_event_source *src, uint64_t usec, void *userdata) {
        return sd_event_exit(sd_event_source_get_event(src), 0);
}

/* Runs the loop past one refresh period, so that the monitor's news is read. */
static void run_a_while(sd_event *e) {
        assert_int_equal(sd_event_add_time_relative(e, NULL, CLOCK_MONOTONIC, 3 * MOUNT_TABLE_REFRESH_USEC, 0,
                                                    on_quit, NULL),
                         0);
        assert_int_equal(sd_event_loop(e), 0);
}

static void test_tracks_mounts_under_root(void **state) {
        MountTable *t = NULL;
        Seen seen = {};

        if (geteuid() != 0)
                skip();
        assert_int_equal(sd_event_new(&seen.event), 0);
        assert_int_equal(mount_table_new(seen.event, root, source(), on_changed, &seen, &t), 0);
        check_source(t);
        assert_int_equal(mount_table_count(t), 0);

        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0); /* stacked */
        assert_int_equal(mount("tmpfs", outside, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount("tmpfs", b, "tmpfs", 0, "size=1m"), 0);
        run_a_while(seen.event);
        /* Four changes, read once: the burst costs one read of mountinfo. */
        assert_int_equal(seen.calls, 1);
        assert_int_equal(mount_table_count(t), 2);
        assert_string_equal(mount_table_target(t, 0), a);
        assert_string_equal(mount_table_target(t, 1), b);
        assert_null(mount_table_target(t, 2));
        assert_true(mount_table_is_mounted(t, a));
        assert_true(mount_table_is_mounted(t, b));
        assert_false(mount_table_is_mounted(t, outside));

        /* One of two stacked mounts goes: the target is still mounted. */
        assert_int_equal(umount2(a, 0), 0);
        assert_int_equal(umount2(b, 0), 0);
        sd_event_unref(seen.event);
        assert_int_equal(sd_event_new(&seen.event), 0);
        mount_table_free(t);
        assert_int_equal(mount_table_new(seen.event, root, source(), on_changed, &seen, &t), 0);
        assert_true(mount_table_is_mounted(t, a));
        assert_int_equal(umount2(a, 0), 0);
        run_a_while(seen.event);
        assert_int_equal(seen.calls, 2);
        assert_int_equal(mount_table_count(t), 0);
        assert_false(mount_table_is_mounted(t, a));
        mount_table_free(t);
        sd_event_unref(seen.event);
}

/* Runs the loop until the owner was called "calls" times (or a long
 * while: then the test fails on the count), without ending the loop. */
static void run_until_told(Seen *seen, unsigned calls) {
        for (unsigned i = 0; i < 200 && seen->calls < calls; i++)
                assert_true(sd_event_run(seen->event, 50 * USEC_PER_MSEC) >= 0);
}

/* The owner hears which targets changed, the same on both sources: a
 * target mounted, unmounted, or with a mount stacked on it or taken off
 * it; nothing outside root-dir, nothing that did not change. */
static void test_tells_what_changed(void **state) {
        char expect[400];
        MountTable *t = NULL;
        Seen seen = {};

        if (geteuid() != 0)
                skip();
        assert_int_equal(mount("tmpfs", b, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(sd_event_new(&seen.event), 0);
        assert_int_equal(mount_table_new(seen.event, root, source(), on_changed, &seen, &t), 0);
        check_source(t);

        /* The table's first read is no change: an unrelated mount outside
         * root-dir is told with nothing in it. */
        assert_int_equal(mount("tmpfs", outside, "tmpfs", 0, "size=1m"), 0);
        mount_table_refresh_soon(t, 0);
        run_until_told(&seen, 1);
        assert_int_equal(seen.calls, 1);
        assert_string_equal(seen.changed, "");

        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        run_until_told(&seen, 2);
        assert_int_equal(seen.calls, 2);
        assert_string_equal(seen.changed, a);

        /* Stacked on a, and b gone: both told, a though still mounted. */
        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(umount2(b, 0), 0);
        run_until_told(&seen, 3);
        assert_int_equal(seen.calls, 3);
        snprintf(expect, sizeof expect, "%s %s", a, b);
        assert_string_equal(seen.changed, expect);
        assert_true(mount_table_is_mounted(t, a));

        /* A refresh of the caller's own (the unstage guard's) reads the
         * change first: the owner is told of it all the same. */
        assert_int_equal(umount2(a, 0), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        run_until_told(&seen, 4);
        assert_int_equal(seen.calls, 4);
        assert_string_equal(seen.changed, a);

        assert_int_equal(umount2(a, 0), 0);
        assert_int_equal(umount2(outside, 0), 0);
        mount_table_free(t);
        sd_event_unref(seen.event);
}

/* kubelet's mount references: bind mounts of one file system under
 * root-dir, whatever their paths; another file system is not one. */
static void test_other_mounts_of_a_file_system(void **state) {
        MountTable *t = NULL;
        const char *refs[4];

        if (geteuid() != 0)
                skip();
        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount(a, b, NULL, MS_BIND, NULL), 0);
        assert_int_equal(mount("tmpfs", outside, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount_table_new(NULL, root, source(), NULL, NULL, &t), 0);
        check_source(t);
        assert_int_equal(mount_table_other_mounts(t, a, refs, 4), 1);
        assert_string_equal(refs[0], b);
        assert_int_equal(mount_table_other_mounts(t, b, refs, 4), 1);
        assert_string_equal(refs[0], a);
        assert_int_equal(mount_table_other_mounts(t, outside, refs, 4), 0); /* not under root */
        assert_int_equal(umount2(b, 0), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        assert_int_equal(mount_table_other_mounts(t, a, refs, 4), 0);
        assert_non_null(mount_table_get(t, a));
        assert_null(mount_table_get(t, b));
        assert_int_equal(umount2(a, 0), 0);
        assert_int_equal(umount2(outside, 0), 0);
        mount_table_free(t);
}

/* A reference hidden under another mount still holds the file system:
 * stacked mounts count on either side, each target once. */
static void test_other_mounts_stacked(void **state) {
        MountTable *t = NULL;
        const char *refs[4];

        if (geteuid() != 0)
                skip();
        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount(a, b, NULL, MS_BIND, NULL), 0);
        assert_int_equal(mount(a, b, NULL, MS_BIND, NULL), 0);              /* the same, twice */
        assert_int_equal(mount("tmpfs", b, "tmpfs", 0, "size=1m"), 0);   /* something else on top */
        assert_int_equal(mount_table_new(NULL, root, source(), NULL, NULL, &t), 0);
        assert_int_equal(mount_table_count(t), 2);
        assert_int_equal(mount_table_other_mounts(t, a, refs, 4), 1);
        assert_string_equal(refs[0], b);
        /* And with another mount on top of the staged one. */
        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        assert_int_equal(mount_table_other_mounts(t, a, refs, 4), 1);
        assert_string_equal(refs[0], b);
        assert_int_equal(mount_table_other_mounts(t, a, refs, 0), 1); /* counted, none filled */
        for (int i = 0; i < 4; i++)
                assert_int_equal(umount2(i < 2 ? a : b, 0), 0);
        assert_int_equal(umount2(b, 0), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        assert_int_equal(mount_table_count(t), 0);
        mount_table_free(t);
}

/* Issue 29 item 4: no event reports a directory renamed above a mount
 * point, so the table (the kernel path: what statmount said when the mount
 * came) keeps the old path.  mount_table_mounted() asks the kernel before
 * saying "nothing mounted"; mount_table_reload() lists everything again,
 * for the unstage guard, also a bind moved into root-dir from outside. */
static void test_rename_above_a_mount(void **state) {
        char d[200], e[200], dm[220], em[220], held[200], moved[220], in[200], inm[220];
        MountTable *t = NULL;
        const char *refs[4];

        if (geteuid() != 0)
                skip();
        snprintf(d, sizeof d, "%s/d", root);
        snprintf(e, sizeof e, "%s/e", root);
        snprintf(dm, sizeof dm, "%s/m", d);
        snprintf(em, sizeof em, "%s/m", e);
        snprintf(held, sizeof held, "%s/held", base); /* outside root-dir, its file system */
        snprintf(moved, sizeof moved, "%s/s", held);
        snprintf(in, sizeof in, "%s/h", root);
        snprintf(inm, sizeof inm, "%s/s", in);
        assert_int_equal(mkdir(d, 0755), 0);
        assert_int_equal(mkdir(dm, 0755), 0);
        assert_int_equal(mount("tmpfs", dm, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(mount_table_new(NULL, root, source(), NULL, NULL, &t), 0);
        check_source(t);
        assert_int_equal(mount_table_mounted(t, dm), 1);

        assert_int_equal(rename(d, e), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        if (streq(mount_table_source(t), "kernel"))
                assert_false(mount_table_is_mounted(t, em)); /* no event told of it */
        else
                assert_true(mount_table_is_mounted(t, em));  /* mountinfo, read again */
        assert_int_equal(mount_table_mounted(t, em), 1);  /* from the kernel, whatever the table said */
        assert_int_equal(mount_table_mounted(t, e), 0);   /* a plain directory */
        assert_int_equal(mount_table_mounted(t, in), 0);  /* no such path */
        assert_int_equal(mount_table_reload(t), 0);
        assert_true(mount_table_is_mounted(t, em));
        assert_false(mount_table_is_mounted(t, dm));
        assert_int_equal(mount_table_mounted(t, dm), 0);

        /* A bind of it made outside root-dir, its directory then renamed in. */
        assert_int_equal(mkdir(held, 0755), 0);
        assert_int_equal(mkdir(moved, 0755), 0);
        assert_int_equal(mount(em, moved, NULL, MS_BIND, NULL), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        assert_int_equal(rename(held, in), 0);
        assert_int_equal(mount_table_reload(t), 0);
        assert_int_equal(mount_table_other_mounts(t, em, refs, 4), 1);
        assert_string_equal(refs[0], inm);

        assert_int_equal(umount2(inm, 0), 0);
        assert_int_equal(umount2(em, 0), 0);
        assert_int_equal(rmdir(inm), 0);
        assert_int_equal(rmdir(in), 0);
        assert_int_equal(rmdir(em), 0);
        assert_int_equal(rmdir(e), 0);
        mount_table_free(t);
}

/* A loop that is never idle: a source at normal priority always pending. */
static int on_busy(sd_event_source *s, void *userdata) {
        return 0;
}

typedef struct Busy {
        sd_event *event;
        unsigned calls;
} Busy;

static void on_changed_busy(MountTable *t, const Hashmap *changed, void *userdata) {
        Busy *busy_state = userdata;
        busy_state->calls++;
        (void) sd_event_exit(busy_state->event, 0);
}

static int on_give_up(sd_event_source *src, uint64_t usec, void *userdata) {
        return sd_event_exit(sd_event_source_get_event(src), 0);
}

/* A mount lost while the loop is never idle is still told, within the
 * bound: the idle-priority read alone would wait for good. */
static void test_told_however_busy(void **state) {
        MountTable *t = NULL;
        sd_event_source *busy = NULL, *give_up = NULL;
        Busy bs = {};

        if (geteuid() != 0)
                skip();
        assert_int_equal(mount("tmpfs", a, "tmpfs", 0, "size=1m"), 0);
        assert_int_equal(sd_event_new(&bs.event), 0);
        assert_int_equal(mount_table_new(bs.event, root, source(), on_changed_busy, &bs, &t), 0);
        check_source(t);
        assert_true(mount_table_is_mounted(t, a));
        assert_int_equal(sd_event_add_defer(bs.event, &busy, on_busy, NULL), 0);
        assert_int_equal(sd_event_source_set_enabled(busy, SD_EVENT_ON), 0);
        /* Ten times the bound: what a test on a loaded machine can wait.
         * Ahead of the busy source, or the test would hang, not fail. */
        assert_int_equal(sd_event_add_time_relative(bs.event, &give_up, CLOCK_MONOTONIC,
                                                    10 * MOUNT_TABLE_MAX_DELAY_USEC, 0, on_give_up, NULL),
                         0);
        assert_int_equal(sd_event_source_set_priority(give_up, SD_EVENT_PRIORITY_IMPORTANT - 1), 0);
        assert_int_equal(umount2(a, MNT_DETACH), 0);
        assert_int_equal(sd_event_loop(bs.event), 0);
        assert_int_equal(bs.calls, 1);
        assert_false(mount_table_is_mounted(t, a));
        sd_event_source_unref(busy);
        sd_event_source_unref(give_up);
        mount_table_free(t);
        sd_event_unref(bs.event);
}

static void parse(const char *line, int expect_r, int expect_id, dev_t expect_devno, const char *expect_target) {
        char *target = NULL;
        dev_t devno = 0;
        int id = -1;

        assert_int_equal(mountinfo_parse_line(line, strlen(line), &id, &devno, &target), expect_r);
        if (expect_r < 0) {
                assert_null(target);
                return;
        }
        assert_int_equal(id, expect_id);
        assert_true(devno == expect_devno);
        assert_string_equal(target, expect_target);
        free(target);
}

/* mountinfo's format (proc(5)): what the kernel's mangle escapes comes back. */
static void test_parse_mountinfo_lines(void **state) {
        parse("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue", 0, 36,
              makedev(98, 0), "/mnt2");
        parse("7 1 0:41 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/with\\040space/mount rw - tmpfs t rw",
              0, 7, makedev(0, 41), "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/with space/mount");
        parse("8 1 259:3 / /a\\134b\\011c\\012d rw - ext4 /dev/x rw", 0, 8, makedev(259, 3), "/a\\b\tc\nd");
        /* A backslash that starts no escape, and one at the very end. */
        parse("9 1 0:5 / /a\\9b\\ rw - tmpfs t rw", 0, 9, makedev(0, 5), "/a\\9b\\");
        parse("10 1 0:5 / /a\\000b rw - tmpfs t rw", -EBADMSG, 0, 0, NULL);
        parse("10 1 0:5 /", -EBADMSG, 0, 0, NULL);
        parse("x 1 0:5 / /a rw", -EBADMSG, 0, 0, NULL);
        parse("11 1 05 / /a rw", -EBADMSG, 0, 0, NULL);
        parse("12  1 0:5 / /a rw", -EBADMSG, 0, 0, NULL);
        parse("", -EBADMSG, 0, 0, NULL);
        parse("13 1 0: / /a rw", -EBADMSG, 0, 0, NULL);

        /* Only "len" bytes are read: a line in the middle of the file has no NUL. */
        {
                const char text[] = "14 1 0:6 / /abc rw\n15 1 0:7 / /next rw";
                char *target = NULL;
                dev_t devno;
                int id;
                assert_int_equal(mountinfo_parse_line(text, 14, &id, &devno, &target), 0);
                assert_string_equal(target, "/ab");
                free(target);
        }
}

static int use_mountinfo(void **state) {
        current_source = MOUNT_SOURCE_MOUNTINFO;
        return 0;
}

static int use_auto(void **state) {
        current_source = MOUNT_SOURCE_AUTO;
        return 0;
}

#define BOTH(f)                                                                                            \
        cmocka_unit_test_setup_teardown(f, use_auto, NULL),                                                 \
                cmocka_unit_test_setup_teardown(f, use_mountinfo, use_auto)

int main(void) {
        const struct CMUnitTest tests[] = { BOTH(test_tracks_mounts_under_root),
                                            BOTH(test_tells_what_changed),
                                            BOTH(test_other_mounts_of_a_file_system),
                                            BOTH(test_other_mounts_stacked),
                                            BOTH(test_told_however_busy),
                                            BOTH(test_rename_above_a_mount),
                                            cmocka_unit_test(test_parse_mountinfo_lines) };
        return cmocka_run_group_tests(tests, setup, teardown);
}
