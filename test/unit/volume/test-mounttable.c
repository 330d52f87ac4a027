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
        Seen *s = userdata;
        s->calls++;
        sd_event_exit(s->event, 0);
}

static void run_until_change(sd_event *e) {
        /* The monitor reports asynchronously; bound the wait. */
        for (int i = 0; i < 50; i++) {
                int r = sd_event_run(e, 100 * USEC_PER_MSEC);
                assert_true(r >= 0);
                if (sd_event_get_state(e) == SD_EVENT_FINISHED)
                        return;
        }
        fail_msg("no mount table change reported");
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
        run_until_change(seen.event);
        assert_true(seen.calls >= 1);
        assert_int_equal(mount_table_count(t), 1);
        assert_string_equal(mount_table_target(t, 0), a);
        assert_true(mount_table_is_mounted(t, a));
        assert_false(mount_table_is_mounted(t, b));
        assert_false(mount_table_is_mounted(t, outside));
        assert_null(mount_table_target(t, 1));

        assert_int_equal(mount(a, b, NULL, MS_BIND, NULL), 0);
        assert_int_equal(umount2(a, 0), 0);
        assert_int_equal(umount2(a, 0), 0);
        assert_int_equal(mount_table_refresh(t), 0);
        assert_int_equal(mount_table_count(t), 1);
        assert_true(mount_table_is_mounted(t, b));
        assert_false(mount_table_is_mounted(t, a));
        mount_table_free(t);
        sd_event_unref(seen.event);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_tracks_mounts_under_root) };
        return cmocka_run_group_tests(tests, setup, teardown);
}
