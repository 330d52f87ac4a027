/* SPDX-License-Identifier: Apache-2.0 */
/* Durability off the loop (volume/host/rootsync.c): what a failed early
 * sync of the intent log (root_sync_kick) means for the takes after it.
 * The log's fdatasync() fails here on demand: the test is linked with
 * --wrap=intent_log_sync (test/unit/volume/meson.build). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "volume/host/intentlog.h"
#include "volume/host/rootdir.h"
#include "volume/internal.h"

#define BOOT "6f0c4bd8-3a3e-4b8e-9d55-0d7b6a1f2c11"

/* The next this many syncs of the log fail with EIO, as a disk's write
 * error does; counted as they happen, from the sync thread. */
static atomic_int syncs_to_fail;
static atomic_int syncs_done;

int __real_intent_log_sync(IntentLog *l);
int __wrap_intent_log_sync(IntentLog *l);
int __wrap_intent_log_sync(IntentLog *l) {
        int r = atomic_load(&syncs_to_fail) > 0 ? (atomic_fetch_sub(&syncs_to_fail, 1), -EIO)
                                                 : __real_intent_log_sync(l);
        atomic_fetch_add(&syncs_done, 1);
        return r;
}

static char base[] = "/tmp/kvolumed-rootsync-XXXXXX";

static int setup(void **state) {
        assert_non_null(mkdtemp(base));
        return 0;
}

static int teardown(void **state) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        assert_int_equal(system(cmd), 0);
        return 0;
}

/* What the pass's operations were told. */
typedef struct Told {
        Operation *op;
        int error;
        bool done;
} Told;

static void on_done(Operation **ops, size_t n, int error, void *userdata) {
        Told *t = userdata;

        assert_int_equal(n, 1);
        assert_ptr_equal(ops[0], t->op);
        t->error = error;
        t->done = true;
}

static void run_until_told(sd_event *e, Told *t) {
        for (int i = 0; i < 3000 && !t->done; i++) /* up to 30 s */
                assert_true(sd_event_run(e, 10 * 1000) >= 0);
        assert_true(t->done);
}

static void wait_for_syncs(int n) {
        for (int i = 0; i < 3000 && atomic_load(&syncs_done) < n; i++)
                usleep(10 * 1000);
        assert_true(atomic_load(&syncs_done) >= n);
}

/* The early sync failed, and the take that followed it had a record the
 * log could not hold: its files were made durable one by one, which covers
 * what the failed sync was for.  The error is that take's to say or drop,
 * never a later take's: the next pass's operations succeed. */
static void test_a_failed_early_sync_is_not_left_to_a_later_take(void **state) {
        char root[200], big[6000];
        Operation *first = (Operation *) 0x1, *second = (Operation *) 0x2;
        Told told = {};
        sd_event *e = NULL;
        RootSync *s = NULL;
        RootDir *r = NULL;

        snprintf(root, sizeof root, "%s/root", base);
        assert_int_equal(root_dir_open(root, &r), 0);
        assert_int_equal(root_dir_replay_intents(r, BOOT), 0);
        assert_true(sd_event_new(&e) >= 0);
        assert_int_equal(root_sync_new(e, r, on_done, &told, &s), 0);

        /* A pass: its record logged ahead, the log synced early — and that
         * sync fails. */
        atomic_store(&syncs_to_fail, 1);
        atomic_store(&syncs_done, 0);
        root_dir_log_ahead(r, "kvolumed/a/kvolumed.json", "{\"a\":1}", 7, 0640);
        root_sync_kick(s);
        wait_for_syncs(1);
        assert_int_equal(atomic_load(&syncs_to_fail), 0);
        assert_int_equal(root_dir_mkdir_p(r, "kvolumed/a", 0750, NULL), 1);
        assert_int_equal(root_dir_write_logged_file(r, "kvolumed/a/kvolumed.json", "{\"a\":1}", 7, 0640), 0);
        /* ... and a record too large for a slot: the take is made durable
         * file by file. */
        memset(big, 'x', sizeof big);
        assert_int_equal(root_dir_write_file(r, "kvolumed/a/big.json", big, sizeof big, 0640, false), 0);
        told = (Told){ .op = first };
        assert_int_equal(root_sync_submit(s, &first, 1), 0);
        run_until_told(e, &told);
        assert_int_equal(told.error, 0);

        /* The next pass, all in the log, nothing failing. */
        root_dir_log_ahead(r, "kvolumed/b/kvolumed.json", "{\"b\":1}", 7, 0640);
        assert_int_equal(root_dir_mkdir_p(r, "kvolumed/b", 0750, NULL), 1);
        assert_int_equal(root_dir_write_logged_file(r, "kvolumed/b/kvolumed.json", "{\"b\":1}", 7, 0640), 0);
        told = (Told){ .op = second };
        assert_int_equal(root_sync_submit(s, &second, 1), 0);
        run_until_told(e, &told);
        assert_int_equal(told.error, 0);

        root_sync_free(s);
        sd_event_unref(e);
        root_dir_free(r);
}

/* The early sync failed and the take after it is all in the log: its own
 * sync of the log may succeed only because the kernel reported the write
 * error once already, so the take's operations are told of the failure. */
static void test_a_failed_early_sync_fails_the_logged_take_after_it(void **state) {
        char root[200];
        Operation *op = (Operation *) 0x3;
        Told told = { .op = op };
        sd_event *e = NULL;
        RootSync *s = NULL;
        RootDir *r = NULL;

        snprintf(root, sizeof root, "%s/logged", base);
        assert_int_equal(root_dir_open(root, &r), 0);
        assert_int_equal(root_dir_replay_intents(r, BOOT), 0);
        assert_true(sd_event_new(&e) >= 0);
        assert_int_equal(root_sync_new(e, r, on_done, &told, &s), 0);

        atomic_store(&syncs_to_fail, 1);
        atomic_store(&syncs_done, 0);
        root_dir_log_ahead(r, "kvolumed/c/kvolumed.json", "{\"c\":1}", 7, 0640);
        root_sync_kick(s);
        wait_for_syncs(1);
        assert_int_equal(root_dir_mkdir_p(r, "kvolumed/c", 0750, NULL), 1);
        assert_int_equal(root_dir_write_logged_file(r, "kvolumed/c/kvolumed.json", "{\"c\":1}", 7, 0640), 0);
        assert_int_equal(root_sync_submit(s, &op, 1), 0);
        run_until_told(e, &told);
        assert_int_equal(told.error, -EIO);

        root_sync_free(s);
        sd_event_unref(e);
        root_dir_free(r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_failed_early_sync_is_not_left_to_a_later_take),
                cmocka_unit_test(test_a_failed_early_sync_fails_the_logged_take_after_it),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
