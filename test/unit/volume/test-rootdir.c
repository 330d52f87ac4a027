/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "test/unit/tmptree.h"
#include "volume/host/rootdir.h"

/* A symlink on the way is refused: ELOOP, or ENOTDIR where a directory was required. */
#define assert_refused(expr)                                                                               \
        do {                                                                                               \
                int _r = (expr);                                                                           \
                if (_r != -ELOOP && _r != -ENOTDIR)                                                        \
                        fail_msg("%s returned %d, not -ELOOP/-ENOTDIR", #expr, _r);                          \
        } while (0)

static char base[] = "/tmp/kvolumed-rootdir-XXXXXX";
static char root_path[128], outside[128];

static int setup(void **state) {
        assert_non_null(mkdtemp(base));
        snprintf(root_path, sizeof root_path, "%s/root", base);
        snprintf(outside, sizeof outside, "%s/outside", base);
        assert_int_equal(mkdir(outside, 0700), 0);
        return 0;
}

static int teardown(void **state) {
        assert_int_equal(tmptree_remove(base), 0);
        return 0;
}

static void test_mkdir_write_read_remove(void **state) {
        RootDir *r = NULL;
        char *text = NULL;
        size_t size = 0;
        struct stat st;
        int fd = -1;

        assert_int_equal(root_dir_open(root_path, &r), 0);
        assert_int_equal(root_dir_mkdir_p(r, "pods/u/volumes/kubernetes.io~csi/v", 0750, &fd), 1);
        assert_true(fd >= 0);
        assert_int_equal(fstat(fd, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0750);
        close(fd);
        assert_int_equal(root_dir_mkdir_p(r, "pods/u/volumes/kubernetes.io~csi/v", 0750, NULL), 0);

        assert_int_equal(root_dir_write_file(r, "pods/u/volumes/kubernetes.io~csi/v/vol_data.json", "{}\n", 3,
                                             0640, true),
                         0);
        assert_int_equal(root_dir_write_file(r, "pods/u/volumes/kubernetes.io~csi/v/vol_data.json", "{\"a\":\"b\"}\n",
                                             10, 0640, false),
                         0);
        assert_int_equal(root_dir_sync(r), 0);
        assert_int_equal(root_dir_read_file(r, "pods/u/volumes/kubernetes.io~csi/v/vol_data.json", 4096, &text, &size),
                         0);
        assert_string_equal(text, "{\"a\":\"b\"}\n");
        assert_int_equal(size, 10);
        free(text);
        assert_int_equal(root_dir_read_file(r, "pods/u/volumes/kubernetes.io~csi/v/vol_data.json", 5, &text, &size),
                         -EFBIG);
        assert_int_equal(root_dir_read_file(r, "pods/u", 4096, &text, &size), -EBADF);
        assert_int_equal(root_dir_exists(r, "pods/u/volumes"), 1);
        assert_int_equal(root_dir_exists(r, "pods/nope"), 0);
        assert_int_equal(root_dir_is_mount_point(r, "pods/u"), 0);

        /* Not empty: rmdir refuses, never a recursive delete. */
        assert_int_equal(root_dir_rmdir(r, "pods/u/volumes/kubernetes.io~csi/v"), -ENOTEMPTY);
        assert_int_equal(root_dir_unlink(r, "pods/u/volumes/kubernetes.io~csi/v/vol_data.json"), 0);
        assert_int_equal(root_dir_unlink(r, "pods/u/volumes/kubernetes.io~csi/v/vol_data.json"), 0);
        assert_int_equal(root_dir_rmdir(r, "pods/u/volumes/kubernetes.io~csi/v"), 0);
        assert_int_equal(root_dir_rmdir(r, "pods/u/volumes/kubernetes.io~csi/v"), 0);
        assert_int_equal(root_dir_rmdir(r, "pods/gone/x"), 0);
        root_dir_free(r);
}

static void test_symlinks_never_lead_outside(void **state) {
        RootDir *r = NULL;
        char link[256], probe[256], *text = NULL;
        struct stat st;
        int fd = -1;

        assert_int_equal(root_dir_open(root_path, &r), 0);
        assert_int_equal(root_dir_mkdir_p(r, "pods/p", 0750, NULL), 1);
        snprintf(link, sizeof link, "%s/pods/p/volumes", root_path);
        assert_int_equal(symlink(outside, link), 0);

        assert_refused(root_dir_mkdir_p(r, "pods/p/volumes/kubernetes.io~csi", 0750, NULL));
        assert_refused(root_dir_write_file(r, "pods/p/volumes/vol_data.json", "x", 1, 0600, false));
        assert_refused(root_dir_open_dir(r, "pods/p/volumes", &fd));
        assert_refused(root_dir_read_file(r, "pods/p/volumes", 10, &text, NULL));
        assert_int_equal(root_dir_exists(r, "pods/p/volumes"), 1); /* the link itself exists */
        snprintf(probe, sizeof probe, "%s/kubernetes.io~csi", outside);
        assert_int_equal(stat(probe, &st), -1);
        snprintf(probe, sizeof probe, "%s/vol_data.json", outside);
        assert_int_equal(stat(probe, &st), -1);

        /* A symlinked file is not followed either. */
        snprintf(probe, sizeof probe, "%s/secret", outside);
        FILE *f = fopen(probe, "w");
        fputs("secret", f);
        fclose(f);
        snprintf(link, sizeof link, "%s/pods/p/data.json", root_path);
        assert_int_equal(symlink(probe, link), 0);
        assert_refused(root_dir_read_file(r, "pods/p/data.json", 100, &text, NULL));
        /* Replacing the link is fine: rename replaces the entry, not its target. */
        assert_int_equal(root_dir_write_file(r, "pods/p/data.json", "new", 3, 0600, false), 0);
        assert_int_equal(root_dir_read_file(r, "pods/p/data.json", 100, &text, NULL), 0);
        assert_string_equal(text, "new");
        free(text);
        f = fopen(probe, "r");
        char buf[16] = "";
        assert_non_null(fgets(buf, sizeof buf, f));
        fclose(f);
        assert_string_equal(buf, "secret");

        /* Relative escapes are refused outright. */
        assert_int_equal(root_dir_mkdir_p(r, "../escape", 0750, NULL), -EINVAL);
        assert_int_equal(root_dir_mkdir_p(r, "pods/../../escape", 0750, NULL), -EINVAL);
        assert_int_equal(root_dir_write_file(r, "/etc/x", "x", 1, 0600, false), -EINVAL);
        assert_int_equal(root_dir_rmdir(r, "pods/p/.."), -EINVAL);
        assert_int_equal(root_dir_unlink(r, ""), -EINVAL);
        root_dir_free(r);
}

static bool has(char **list, size_t n, const char *path) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i], path) == 0)
                        return true;
        return false;
}

/* What a sync makes durable is exactly what changed: each file written, each
 * directory whose entries changed (and each one made), nothing else. */
static void test_changes_noted(void **state) {
        RootDir *r = NULL;
        RootChanges c;
        char path[300];

        assert_int_equal(root_dir_open(root_path, &r), 0);
        assert_int_equal(root_dir_mkdir_p(r, "pods", 0750, NULL) >= 0, 1);
        root_dir_take_changes(r, &c); /* what earlier tests left */
        root_changes_done(&c);

        assert_int_equal(root_dir_mkdir_p(r, "pods/n/volumes/v", 0750, NULL), 1);
        assert_int_equal(root_dir_write_file(r, "pods/n/volumes/v/vol_data.json", "{}", 2, 0640, false), 0);
        assert_int_equal(root_dir_write_file(r, "top.json", "{}", 2, 0640, false), 0);
        root_dir_take_changes(r, &c);
        assert_false(c.all);
        assert_int_equal(c.n_files, 2);
        assert_true(has(c.files, c.n_files, "pods/n/volumes/v/vol_data.json"));
        assert_true(has(c.files, c.n_files, "top.json"));
        /* "pods" existed: its entry for "n" changed, not its own. */
        assert_int_equal(c.n_dirs, 5);
        assert_true(has(c.dirs, c.n_dirs, ""));
        assert_true(has(c.dirs, c.n_dirs, "pods"));
        assert_true(has(c.dirs, c.n_dirs, "pods/n"));
        assert_true(has(c.dirs, c.n_dirs, "pods/n/volumes"));
        assert_true(has(c.dirs, c.n_dirs, "pods/n/volumes/v"));
        assert_int_equal(root_changes_sync(r->sync_pool, r->fd, &c, NULL), 0);

        /* Gone since the take: skipped, not a failure. */
        assert_int_equal(root_dir_unlink(r, "pods/n/volumes/v/vol_data.json"), 0);
        assert_int_equal(root_dir_unlink(r, "top.json"), 0);
        assert_int_equal(root_changes_sync(r->sync_pool, r->fd, &c, NULL), 0);
        root_changes_done(&c);

        /* Removals: the directories that held the entries. */
        root_dir_take_changes(r, &c);
        assert_int_equal(c.n_files, 0);
        assert_int_equal(c.n_dirs, 2);
        assert_true(has(c.dirs, c.n_dirs, "pods/n/volumes/v"));
        assert_true(has(c.dirs, c.n_dirs, ""));
        root_changes_done(&c);
        assert_int_equal(root_dir_rmdir(r, "pods/n/volumes/v"), 0);
        assert_int_equal(root_dir_rmdir(r, "pods/n/volumes/gone"), 0); /* nothing removed, nothing noted */
        root_dir_take_changes(r, &c);
        assert_int_equal(c.n_dirs, 1);
        assert_string_equal(c.dirs[0], "pods/n/volumes");
        root_changes_done(&c);

        /* Nothing changed: nothing to sync. */
        root_dir_take_changes(r, &c);
        assert_int_equal(c.n_files + c.n_dirs, 0);
        assert_false(c.all);
        root_changes_done(&c);

        /* Past the bound, one syncfs() instead. */
        for (int i = 0; i < 4100; i++) {
                snprintf(path, sizeof path, "pods/n/d%d", i);
                assert_int_equal(root_dir_mkdir_p(r, path, 0750, NULL), 1);
        }
        root_dir_take_changes(r, &c);
        assert_true(c.all);
        assert_int_equal(c.n_files + c.n_dirs, 0);
        assert_int_equal(root_changes_sync(r->sync_pool, r->fd, &c, NULL), 0);
        root_changes_done(&c);
        root_dir_take_changes(r, &c);
        assert_false(c.all);
        root_changes_done(&c);
        root_dir_free(r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_mkdir_write_read_remove),
                cmocka_unit_test(test_symlinks_never_lead_outside),
                cmocka_unit_test(test_changes_noted),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
