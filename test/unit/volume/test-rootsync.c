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

#include "test/unit/tmptree.h"
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
        int r = -EIO;

        if (atomic_load(&syncs_to_fail) > 0)
                atomic_fetch_sub(&syncs_to_fail, 1);
        else
                r = __real_intent_log_sync(l);
        atomic_fetch_add(&syncs_done, 1);
        return r;
}

static char base[] = "/tmp/kvolumed-rootsync-XXXXXX";

static int setup(void **state) {
        assert_non_null(mkdtemp(base));
        return 0;
}

static int teardown(void **state) {
        assert_int_equal(tmptree_remove(base), 0);
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

/* A root-dir with its intent log, and its syncs off the loop. */
typedef struct Node {
        RootDir *r;
        sd_event *e;
        RootSync *s;
        Told told;
} Node;

static void node_open(Node *n, const char *name) {
        char root[200];

        snprintf(root, sizeof root, "%s/%s", base, name);
        *n = (Node) {};
        assert_int_equal(root_dir_open(root, &n->r), 0);
        assert_int_equal(root_dir_replay_intents(n->r, BOOT), 0);
        assert_true(sd_event_new(&n->e) >= 0);
        assert_int_equal(root_sync_new(n->e, n->r, on_done, &n->told, &n->s), 0);
}

static void node_close(Node *n) {
        root_sync_free(n->s);
        sd_event_unref(n->e);
        root_dir_free(n->r);
}

/* A pass's record in dir: logged ahead, its directory and file written;
 * with fail_early, the log's early sync (the kick) fails meanwhile. */
static void record(Node *n, const char *dir, bool fail_early) {
        char path[100];

        snprintf(path, sizeof path, "%s/kvolumed.json", dir);
        root_dir_log_ahead(n->r, path, "{}", 2, 0640);
        if (fail_early) {
                atomic_store(&syncs_to_fail, 1);
                atomic_store(&syncs_done, 0);
                root_sync_kick(n->s);
                wait_for_syncs(1);
                assert_int_equal(atomic_load(&syncs_to_fail), 0);
        }
        assert_int_equal(root_dir_mkdir_p(n->r, dir, 0750, NULL), 1);
        assert_int_equal(root_dir_write_logged_file(n->r, path, "{}", 2, 0640), 0);
}

/* The pass's one operation handed to the sync: what it is told. */
static int submit(Node *n, Operation *op) {
        n->told = (Told){ .op = op };
        assert_int_equal(root_sync_submit(n->s, &op, 1), 0);
        run_until_told(n->e, &n->told);
        return n->told.error;
}

/* The early sync failed, and the take that followed it had a record the
 * log could not hold: its files were made durable one by one, which covers
 * what the failed sync was for.  The error is that take's to say or drop,
 * never a later take's: the next pass's operations succeed. */
static void test_a_failed_early_sync_is_not_left_to_a_later_take(void **state) {
        char big[6000];
        Node n;

        node_open(&n, "root");
        record(&n, "kvolumed/a", true);
        /* ... and a record too large for a slot: the take is made durable
         * file by file. */
        memset(big, 'x', sizeof big);
        assert_int_equal(root_dir_write_file(n.r, "kvolumed/a/big.json", big, sizeof big, 0640, false), 0);
        assert_int_equal(submit(&n, (Operation *) 0x1), 0);

        /* The next pass, all in the log, nothing failing. */
        record(&n, "kvolumed/b", false);
        assert_int_equal(submit(&n, (Operation *) 0x2), 0);
        node_close(&n);
}

/* The early sync failed and the take after it is all in the log: its own
 * sync of the log may succeed only because the kernel reported the write
 * error once already, so the take's operations are told of the failure. */
static void test_a_failed_early_sync_fails_the_logged_take_after_it(void **state) {
        Node n;

        node_open(&n, "logged");
        record(&n, "kvolumed/c", true);
        assert_int_equal(submit(&n, (Operation *) 0x3), -EIO);
        node_close(&n);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_failed_early_sync_is_not_left_to_a_later_take),
                cmocka_unit_test(test_a_failed_early_sync_fails_the_logged_take_after_it),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
