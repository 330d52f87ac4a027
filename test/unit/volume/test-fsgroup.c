/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "volume/fsgroup.h"

#define GID 4242
#define FILES 8
#define WALKS 20000

static char base[] = "/tmp/kv-fsgroup-XXXXXX";
static char volume[300], outside[300];

static int setup(void **state) {
        if (!mkdtemp(base))
                return -1;
        snprintf(volume, sizeof volume, "%s/volume", base);
        snprintf(outside, sizeof outside, "%s/host-secret", base);
        return mkdir(volume, 0755);
}

static int teardown(void **state) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", base);
        return system(cmd) == 0 ? 0 : -1;
}

static void test_applies_group_and_modes(void **state) {
        char path[400];
        struct stat st;

        if (geteuid() != 0)
                skip();
        snprintf(path, sizeof path, "%s/sub", volume);
        assert_int_equal(mkdir(path, 0700), 0);
        snprintf(path, sizeof path, "%s/sub/file", volume);
        close(open(path, O_CREAT | O_WRONLY, 0600));
        assert_int_equal(fsgroup_apply(volume, GID, false), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_gid, GID);
        assert_int_equal(st.st_mode & 07777, 0660);
        snprintf(path, sizeof path, "%s/sub", volume);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 02770);
        /* OnRootMismatch: the root is right now, nothing is walked. */
        snprintf(path, sizeof path, "%s/sub/file", volume);
        assert_int_equal(chmod(path, 0600), 0);
        assert_int_equal(fsgroup_apply(volume, GID, true), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
}

/* A container swaps a file of its volume for a symlink to a host file, over
 * and over, while the walk runs: the host file must never change. */
static void test_symlink_swap_race_changes_nothing_outside(void **state) {
        char victim[400], link_tmp[400], file_tmp[400];
        struct stat st;
        pid_t swapper;

        if (geteuid() != 0)
                skip();
        close(open(outside, O_CREAT | O_WRONLY, 0600));
        for (int i = 0; i < FILES; i++) {
                char p[400];
                snprintf(p, sizeof p, "%s/f%02d", volume, i);
                close(open(p, O_CREAT | O_WRONLY, 0600));
        }
        snprintf(victim, sizeof victim, "%s/victim", volume);
        snprintf(link_tmp, sizeof link_tmp, "%s/.link", volume);
        snprintf(file_tmp, sizeof file_tmp, "%s/.file", volume);
        close(open(victim, O_CREAT | O_WRONLY, 0600));

        swapper = fork();
        assert_true(swapper >= 0);
        if (swapper == 0) {
                for (;;) {
                        /* rename() makes each swap atomic: the name is always there. */
                        (void) unlink(link_tmp);
                        (void) symlink(outside, link_tmp);
                        (void) rename(link_tmp, victim);
                        (void) unlink(file_tmp);
                        close(open(file_tmp, O_CREAT | O_WRONLY, 0600));
                        (void) rename(file_tmp, victim);
                }
        }
        /* Walks for a while, or until the host file changed (then it failed). */
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (int i = 0;; i++) {
                int r = fsgroup_apply(volume, GID + (i % 2), false);
                assert_true(r == 0 || r == -ENOENT);
                assert_int_equal(lstat(outside, &st), 0);
                if ((st.st_mode & 07777) != 0600 || st.st_gid != 0)
                        break;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (i >= WALKS || now.tv_sec - start.tv_sec >= 3)
                        break;
        }
        kill(swapper, SIGKILL);
        waitpid(swapper, NULL, 0);
        assert_int_equal(lstat(outside, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(st.st_gid, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_applies_group_and_modes),
                cmocka_unit_test(test_symlink_swap_race_changes_nothing_outside),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
