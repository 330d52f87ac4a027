/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "test/unit/tmptree.h"
#include "volume/host/rootlock.h"

static char base[] = "/tmp/kvolumed-rootlock-XXXXXX";
static char locks[128];

static int setup(void **state) {
        assert_non_null(mkdtemp(base));
        snprintf(locks, sizeof locks, "%s/run/kvolumed/locks", base);
        return 0;
}

static int teardown(void **state) {
        assert_int_equal(tmptree_remove(base), 0);
        return 0;
}

static void assert_name(const char *path, const char *want) {
        char *name = NULL;
        assert_int_equal(root_lock_file_name(path, &name), 0);
        assert_string_equal(name, want);
        free(name);
}

/* systemd-escape --path: one name per path, never the same for two. */
static void test_file_names(void **state) {
        char long_path[600] = "/";
        char *name = NULL;

        assert_name("/var/lib/kubelet", "var-lib-kubelet.lock");
        assert_name("/var/lib/kubelet/", "var-lib-kubelet.lock");
        assert_name("/srv/kube-let", "srv-kube\\x2dlet.lock");
        assert_name("/srv/kube/let", "srv-kube-let.lock");
        assert_name("/.hidden/a b", "\\x2ehidden-a\\x20b.lock");
        assert_int_equal(root_lock_file_name("/", &name), -EINVAL);
        assert_int_equal(root_lock_file_name("relative", &name), -EINVAL);
        /* Too long for a file name: its hash. */
        for (size_t i = 1; i < sizeof long_path - 1; i++)
                long_path[i] = i % 50 == 0 ? '/' : 'x';
        assert_int_equal(root_lock_file_name(long_path, &name), 0);
        assert_int_equal(strlen(name), strlen("sha256-") + 64 + strlen(".lock"));
        assert_memory_equal(name, "sha256-", 7);
        free(name);
}

/* A second taker is refused by either lock: the path's (another directory
 * there now) or the directory's (another path to it). */
static void test_second_taker_is_refused(void **state) {
        char root[160], moved[160], other_link[160];
        RootLock *first = NULL, *second = NULL;
        char *why = NULL;

        snprintf(root, sizeof root, "%s/second", base);
        snprintf(moved, sizeof moved, "%s/second.old", base);
        snprintf(other_link, sizeof other_link, "%s/second-link", base);
        assert_int_equal(root_lock_take(root, locks, &first), 0);
        assert_string_equal(root_lock_path(first), root);
        assert_int_equal(root_lock_take(root, locks, &second), -EBUSY);

        /* Renamed and made again: a new inode, the same path. */
        assert_int_equal(rename(root, moved), 0);
        assert_int_equal(mkdir(root, 0750), 0);
        assert_int_equal(root_lock_take(root, locks, &second), -EBUSY);
        assert_int_equal(root_lock_check(first, &why), -ESTALE);
        assert_non_null(strstr(why, "is another directory now"));
        free(why);

        /* The old directory by another path: its own flock. */
        assert_int_equal(symlink(moved, other_link), 0);
        assert_int_equal(root_lock_take(other_link, locks, &second), -EBUSY);

        /* Renamed back: the first one's again. */
        assert_int_equal(rmdir(root), 0);
        assert_int_equal(rename(moved, root), 0);
        assert_int_equal(root_lock_check(first, &why), 0);
        assert_null(why);
        root_lock_free(first);
        assert_int_equal(root_lock_take(root, locks, &second), 0);
        root_lock_free(second);
}

/* A symlink in the path: resolved at start, and a change of it later is one. */
static void test_symlink_resolved_once(void **state) {
        char real1[160], real2[160], link[160], tmp[160], slashes[160];
        RootLock *l = NULL, *other = NULL;
        char *why = NULL;
        struct stat st;

        snprintf(real1, sizeof real1, "%s/real1", base);
        snprintf(real2, sizeof real2, "%s/real2", base);
        snprintf(link, sizeof link, "%s/link", base);
        snprintf(tmp, sizeof tmp, "%s/link.tmp", base);
        assert_int_equal(mkdir(real1, 0750), 0);
        assert_int_equal(mkdir(real2, 0750), 0);
        assert_int_equal(symlink(real1, link), 0);
        assert_int_equal(root_lock_take(link, locks, &l), 0);
        assert_string_equal(root_lock_path(l), real1);
        assert_string_equal(root_lock_configured(l), link);
        assert_int_equal(fstat(root_lock_fd(l), &st), 0);
        assert_int_equal(root_lock_check(l, &why), 0);
        /* Either spelling finds it taken. */
        assert_int_equal(root_lock_take(real1, locks, &other), -EBUSY);

        /* The link now leads elsewhere: not root-dir any more, and a second
         * kvolumed of the same configuration is still kept out. */
        assert_int_equal(symlink(real2, tmp), 0);
        assert_int_equal(rename(tmp, link), 0);
        assert_int_equal(root_lock_check(l, &why), -EXDEV);
        assert_non_null(strstr(why, "resolves to"));
        free(why);
        assert_int_equal(root_lock_take(link, locks, &other), -EBUSY);

        /* A spelling that differs only by its slashes is one lock. */
        snprintf(slashes, sizeof slashes, "%s//real2/", base);
        assert_int_equal(root_lock_take(slashes, locks, &other), 0);
        assert_string_equal(root_lock_path(other), real2);
        root_lock_free(other);

        /* Back: fine again. */
        assert_int_equal(symlink(real1, tmp), 0);
        assert_int_equal(rename(tmp, link), 0);
        assert_int_equal(root_lock_check(l, &why), 0);
        root_lock_free(l);
}

/* The lock file removed under a running kvolumed (a cleanup of /run): taken
 * again at the next check, so that it keeps the path. */
static void test_removed_lock_file_is_taken_again(void **state) {
        char root[160], file[300];
        RootLock *l = NULL, *other = NULL;
        char *why = NULL, *name = NULL;
        struct stat st;

        snprintf(root, sizeof root, "%s/removed", base);
        assert_int_equal(root_lock_take(root, locks, &l), 0);
        assert_int_equal(root_lock_file_name(root, &name), 0);
        assert_non_null(strstr(name, "\\x2drootlock\\x2d"));
        snprintf(file, sizeof file, "%s/%s", locks, name);
        free(name);
        assert_int_equal(stat(file, &st), 0);
        assert_true(S_ISREG(st.st_mode) && (st.st_mode & 077) == 0);
        assert_int_equal(stat(locks, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0700);
        assert_int_equal(unlink(file), 0);
        assert_int_equal(root_lock_check(l, &why), 0);
        assert_int_equal(stat(file, &st), 0);
        assert_int_equal(root_lock_take(root, locks, &other), -EBUSY);
        root_lock_free(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_file_names),
                cmocka_unit_test(test_second_taker_is_refused),
                cmocka_unit_test(test_symlink_resolved_once),
                cmocka_unit_test(test_removed_lock_file_is_taken_again),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
