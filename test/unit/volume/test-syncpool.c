/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "volume/host/syncpool.h"

#define ITEMS 64
#define RUNS 200

typedef struct Run {
        unsigned calls[ITEMS]; /* __atomic */
        pid_t tids[ITEMS];
} Run;

static void item(size_t i, void *data) {
        Run *run = data;

        __atomic_fetch_add(&run->calls[i], 1, __ATOMIC_RELAXED);
        run->tids[i] = gettid();
        usleep(10); /* long enough for the others to take some */
}

static size_t tasks(void) {
        DIR *d = opendir("/proc/self/task");
        size_t n = 0;

        assert_non_null(d);
        for (struct dirent *de; (de = readdir(d));)
                n += de->d_name[0] != '.';
        closedir(d);
        return n;
}

/* Every item once per run, on at most SYNC_POOL_THREADS threads in all over
 * every run: the same threads, kept, never started again. */
static void test_threads_kept_across_runs(void **state) {
        SyncPool *p;
        pid_t seen[ITEMS * RUNS];
        size_t n_seen = 0, before = tasks();

        assert_int_equal(sync_pool_new(&p), 0);
        assert_int_equal(sync_pool_threads(p), 0); /* none before the first run */
        for (size_t r = 0; r < RUNS; r++) {
                Run run = {};

                sync_pool_run(p, r % ITEMS + 1, item, &run);
                for (size_t i = 0; i < ITEMS; i++) {
                        assert_int_equal(run.calls[i], i <= r % ITEMS);
                        if (i > r % ITEMS)
                                continue;
                        size_t k = 0;
                        while (k < n_seen && seen[k] != run.tids[i])
                                k++;
                        if (k == n_seen)
                                seen[n_seen++] = run.tids[i];
                }
                assert_int_equal(sync_pool_threads(p), SYNC_POOL_THREADS - 1);
                assert_int_equal(tasks(), before + SYNC_POOL_THREADS - 1);
        }
        assert_in_range(n_seen, 1, SYNC_POOL_THREADS);
        sync_pool_free(p);
}

/* Freed, the pool joins its threads: none left behind. */
static void test_free_joins(void **state) {
        SyncPool *p;
        Run run = {};
        size_t before = tasks();

        assert_int_equal(sync_pool_new(&p), 0);
        sync_pool_run(p, ITEMS, item, &run);
        assert_int_equal(tasks(), before + SYNC_POOL_THREADS - 1);
        sync_pool_free(p);
        /* A joined thread may still be listed for a moment as it exits:
         * wait for it (generously) rather than assume. */
        for (unsigned i = 0; i < 30000 && tasks() != before; i++)
                usleep(1000);
        assert_int_equal(tasks(), before);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_threads_kept_across_runs),
                cmocka_unit_test(test_free_joins),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
