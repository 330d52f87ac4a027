/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "systemd/hashmap.h"

static void test_put_get_replace_remove(void **state) {
        Hashmap *h = hashmap_new();
        int a = 1, b = 2;
        void *old = &a;

        assert_int_equal(hashmap_size(h), 0);
        assert_null(hashmap_get(h, "x"));
        assert_null(hashmap_remove(h, "x"));
        assert_int_equal(hashmap_put(h, "x", &a, &old), 0);
        assert_null(old);
        assert_ptr_equal(hashmap_get(h, "x"), &a);
        assert_int_equal(hashmap_put(h, "x", &b, &old), 0);
        assert_ptr_equal(old, &a);
        assert_ptr_equal(hashmap_get(h, "x"), &b);
        assert_int_equal(hashmap_size(h), 1);
        assert_ptr_equal(hashmap_remove(h, "x"), &b);
        assert_int_equal(hashmap_size(h), 0);
        assert_null(hashmap_get(h, "x"));
        hashmap_free(h);
}

static void test_many_with_churn(void **state) {
        enum { N = 5000 };
        static int values[N];
        Hashmap *h = hashmap_new();
        char key[32];

        for (int round = 0; round < 3; round++) {
                for (int i = 0; i < N; i++) {
                        snprintf(key, sizeof key, "pod-%d", i);
                        values[i] = i;
                        assert_int_equal(hashmap_put(h, key, &values[i], NULL), 0);
                }
                assert_int_equal(hashmap_size(h), N);
                /* Remove the odd ones: tombstones must not break lookups. */
                for (int i = 1; i < N; i += 2) {
                        snprintf(key, sizeof key, "pod-%d", i);
                        assert_ptr_equal(hashmap_remove(h, key), &values[i]);
                }
                for (int i = 0; i < N; i++) {
                        snprintf(key, sizeof key, "pod-%d", i);
                        if (i % 2)
                                assert_null(hashmap_get(h, key));
                        else
                                assert_ptr_equal(hashmap_get(h, key), &values[i]);
                }
                assert_int_equal(hashmap_size(h), N / 2);
        }
        size_t seen = 0, sum = 0;
        const char *k;
        void *v;
        for (size_t it = 0; hashmap_iterate(h, &it, &k, &v);) {
                seen++;
                sum += (size_t) *(int *) v;
                assert_int_equal(atoi(k + 4), *(int *) v);
        }
        assert_int_equal(seen, N / 2);
        assert_int_equal(sum, (size_t) (N / 2 - 1) * (N / 2)); /* 0+2+...+(N-2) */

        /* Removing the current entry while iterating. */
        for (size_t it = 0; hashmap_iterate(h, &it, &k, &v);)
                assert_non_null(hashmap_remove(h, k));
        assert_int_equal(hashmap_size(h), 0);
        hashmap_free(h);
}

/* A map emptied by its removals holds no memory but its own struct: the
 * table of a volume's operations in flight, empty for good once they end,
 * is not kept (issue 31, memory beside 1,000 volumes). */
static void test_emptied_map_gives_its_table_back(void **state) {
        Hashmap *h = hashmap_new();
        int v = 1;

        assert_non_null(h);
        assert_int_equal(hashmap_capacity(h), 0);
        for (int round = 0; round < 3; round++) {
                assert_int_equal(hashmap_put(h, "pod-uid-1", &v, NULL), 0);
                assert_int_equal(hashmap_put(h, "pod-uid-2", &v, NULL), 0);
                assert_true(hashmap_capacity(h) > 0);
                assert_ptr_equal(hashmap_remove(h, "pod-uid-1"), &v);
                assert_ptr_equal(hashmap_remove(h, "pod-uid-2"), &v);
                assert_int_equal(hashmap_capacity(h), 0);
                assert_null(hashmap_get(h, "pod-uid-1"));
                assert_int_equal(hashmap_size(h), 0);
        }
        const char *k;
        size_t it = 0;
        assert_false(hashmap_iterate(h, &it, &k, NULL));
        hashmap_free(h);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_put_get_replace_remove),
                cmocka_unit_test(test_many_with_churn),
                cmocka_unit_test(test_emptied_map_gives_its_table_back),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
