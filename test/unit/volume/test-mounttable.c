/* SPDX-License-Identifier: Apache-2.0 */
/* Runs in a private mount namespace of its own (root needed; skipped otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "volume/mounttable.h"

static char base[] = "/tmp/kvolumed-mounttable-XXXXXX";
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
        char cmd[300];
        if (geteuid() != 0)
                return 0;
        umount2(a, MNT_DETACH);
        umount2(a, MNT_DETACH);
        umount2(b, MNT_DETACH);
        umount2(outside, MNT_DETACH);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        return system(cmd) == 0 ? 0 : -1;
}

typedef struct Seen {
        unsigned calls;
        sd_event *event;
} Seen;

static void on_changed(MountTable *t, void *userdata) {
        ((Seen *) userdata)->calls++;
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
        assert_int_equal(mount_table_new(seen.event, root, on_changed, &seen, &t), 0);
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
        assert_int_equal(mount_table_new(seen.event, root, on_changed, &seen, &t), 0);
        assert_true(mount_table_is_mounted(t, a));
        assert_int_equal(umount2(a, 0), 0);
        run_a_while(seen.event);
        assert_int_equal(seen.calls, 2);
        assert_int_equal(mount_table_count(t), 0);
        assert_false(mount_table_is_mounted(t, a));
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
        assert_int_equal(mount_table_new(NULL, root, NULL, NULL, &t), 0);
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

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_tracks_mounts_under_root),
                                            cmocka_unit_test(test_other_mounts_of_a_file_system) };
        return cmocka_run_group_tests(tests, setup, teardown);
}
