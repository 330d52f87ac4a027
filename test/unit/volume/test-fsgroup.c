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

typedef struct WalkResult {
        bool done;
        int result;
} WalkResult;

static void on_walk_done(FsGroupWalk *w, int result, void *userdata) {
        WalkResult *r = userdata;
        r->done = true;
        r->result = result;
}

static bool reaped(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d", (int) pid);
        return access(path, F_OK) < 0; /* a zombie still has its /proc entry */
}

/* The walk in a child process: "done" comes from the loop, with 0. */
static void test_walk_in_a_child_reports_done(void **state) {
        sd_event *event = NULL;
        FsGroupWalk *w = NULL;
        WalkResult res = {};
        char path[400];
        struct stat st;
        sigset_t mask;

        if (geteuid() != 0)
                skip();
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        assert_int_equal(sigprocmask(SIG_BLOCK, &mask, NULL), 0);
        assert_int_equal(sd_event_new(&event), 0);
        snprintf(path, sizeof path, "%s/walked", volume);
        close(open(path, O_CREAT | O_WRONLY, 0600));
        assert_int_equal(fsgroup_walk_start(event, volume, GID + 1, false, on_walk_done, &res, &w), 0);
        assert_true(fsgroup_walk_pid(w) > 0);
        for (int i = 0; i < 500 && !res.done; i++)
                assert_true(sd_event_run(event, 10 * 1000) >= 0);
        assert_true(res.done);
        assert_int_equal(res.result, 0);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_gid, GID + 1);
        fsgroup_walk_free(w);
        sd_event_unref(event);
}

/* A walk given up (its file system does not answer, or the operation goes)
 * is killed, and reaped by the loop without anyone waiting for it: retries
 * must not pile up zombies. */
static void test_a_walk_given_up_is_killed_and_reaped(void **state) {
        sd_event *event = NULL;
        FsGroupWalk *w = NULL;
        WalkResult res = {};
        sigset_t mask;
        pid_t pid;

        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        assert_int_equal(sigprocmask(SIG_BLOCK, &mask, NULL), 0);
        assert_int_equal(sd_event_new(&event), 0);
        assert_int_equal(fsgroup_walk_start(event, volume, getegid(), false, on_walk_done, &res, &w), 0);
        pid = fsgroup_walk_pid(w);
        assert_true(pid > 0);
        /* Stopped, it makes no progress, as in a dead file system; SIGKILL still ends it. */
        (void) kill(pid, SIGSTOP);
        fsgroup_walk_free(w);
        for (int i = 0; i < 500 && !reaped(pid); i++)
                assert_true(sd_event_run(event, 10 * 1000) >= 0);
        assert_true(reaped(pid));
        assert_false(res.done); /* nobody is told of a walk freed */
        sd_event_unref(event);
}

/* The stall deadline: no progress (a stopped child) for it, and the walk is
 * given up with -ETIMEDOUT, the child killed and reaped. */
static void test_a_walk_without_progress_times_out(void **state) {
        sd_event *event = NULL;
        FsGroupWalk *w = NULL;
        WalkResult res = {};
        sigset_t mask;
        pid_t pid;

        assert_int_equal(setenv("KVOLUMED_TEST_FSGROUP_STALL_MS", "300", 1), 0);
        assert_int_equal(fsgroup_stall_usec(), 300 * 1000);
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        assert_int_equal(sigprocmask(SIG_BLOCK, &mask, NULL), 0);
        assert_int_equal(sd_event_new(&event), 0);
        /* Stopped right after the fork, the child makes no progress (a walk of
         * this small tree may rarely finish first: then the test is skipped). */
        assert_int_equal(fsgroup_walk_start(event, volume, getegid(), false, on_walk_done, &res, &w), 0);
        pid = fsgroup_walk_pid(w);
        (void) kill(pid, SIGSTOP);
        for (int i = 0; i < 500 && !res.done; i++)
                assert_true(sd_event_run(event, 10 * 1000) >= 0);
        if (res.result == 0) {
                /* The child finished before SIGSTOP reached it: nothing to time out. */
                fsgroup_walk_free(w);
                sd_event_unref(event);
                unsetenv("KVOLUMED_TEST_FSGROUP_STALL_MS");
                skip();
        }
        assert_true(res.done);
        assert_int_equal(res.result, -ETIMEDOUT);
        fsgroup_walk_free(w);
        for (int i = 0; i < 500 && !reaped(pid); i++)
                assert_true(sd_event_run(event, 10 * 1000) >= 0);
        assert_true(reaped(pid));
        sd_event_unref(event);
        assert_int_equal(unsetenv("KVOLUMED_TEST_FSGROUP_STALL_MS"), 0);
        assert_int_equal(fsgroup_stall_usec(), FSGROUP_STALL_USEC);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_applies_group_and_modes),
                cmocka_unit_test(test_symlink_swap_race_changes_nothing_outside),
                cmocka_unit_test(test_walk_in_a_child_reports_done),
                cmocka_unit_test(test_a_walk_given_up_is_killed_and_reaped),
                cmocka_unit_test(test_a_walk_without_progress_times_out),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
