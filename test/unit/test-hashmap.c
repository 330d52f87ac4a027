/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

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

/* A map of one entry, the most common (a volume's pods), has a table of
 * two slots: 48 bytes of each volume less than four (issue 31, memory). */
static void test_one_entry_small_table(void **state) {
        Hashmap *h = hashmap_new();
        int v = 1;
        char key[32];

        assert_int_equal(hashmap_put(h, "pod-uid-1", &v, NULL), 0);
        assert_int_equal(hashmap_capacity(h), 2);
        assert_ptr_equal(hashmap_get(h, "pod-uid-1"), &v);
        /* and grows at the load bound, entries found again */
        for (int i = 2; i <= 10; i++) {
                snprintf(key, sizeof key, "pod-uid-%d", i);
                assert_int_equal(hashmap_put(h, key, &v, NULL), 0);
                assert_true(hashmap_size(h) * 4 <= hashmap_capacity(h) * 3);
        }
        for (int i = 1; i <= 10; i++) {
                snprintf(key, sizeof key, "pod-uid-%d", i);
                assert_ptr_equal(hashmap_get(h, key), &v);
        }
        hashmap_free(h);
}

/* hashmap_ensure_put() makes the map at its first entry; until then NULL
 * reads as an empty map. */
static void test_ensure_put(void **state) {
        Hashmap *h = NULL;
        int a = 1, b = 2;
        void *old = &a;
        size_t it = 0;

        assert_int_equal(hashmap_size(h), 0);
        assert_null(hashmap_get(h, "x"));
        assert_null(hashmap_remove(h, "x"));
        assert_false(hashmap_iterate(h, &it, NULL, NULL));
        assert_int_equal(hashmap_ensure_put(&h, "x", &a, &old), 0);
        assert_non_null(h);
        assert_null(old);
        assert_int_equal(hashmap_ensure_put(&h, "x", &b, &old), 0);
        assert_ptr_equal(old, &a);
        assert_ptr_equal(hashmap_get(h, "x"), &b);
        h = hashmap_free(h);
        assert_null(h);
}

/* A borrowing map keeps the caller's key pointer: no copy, and a value
 * that replaces another brings its own key, so that the replaced value
 * (and the key it owned) may go at once. */
static void test_borrowing_keeps_the_values_keys(void **state) {
        Hashmap *h = hashmap_new_borrowing();
        char *first = strdup("pod-uid-1"), *second = strdup("pod-uid-1");
        const char *key = NULL;
        void *old = NULL;
        size_t it = 0;

        assert_non_null(h);
        assert_int_equal(hashmap_put(h, first, first, NULL), 0);
        assert_true(hashmap_iterate(h, &it, &key, NULL));
        assert_ptr_equal(key, first); /* not a copy */

        assert_int_equal(hashmap_put(h, second, second, &old), 0);
        assert_ptr_equal(old, first);
        free(first); /* the replaced value goes, its key with it */
        assert_ptr_equal(hashmap_get(h, "pod-uid-1"), second);
        it = 0;
        assert_true(hashmap_iterate(h, &it, &key, NULL));
        assert_ptr_equal(key, second);

        assert_null(hashmap_get(h, NULL)); /* a NULL key is absent, not a crash */
        assert_null(hashmap_remove(h, NULL));
        assert_ptr_equal(hashmap_remove(h, second), second);
        assert_int_equal(hashmap_size(h), 0);
        free(second);
        hashmap_free(h); /* frees no key */
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_put_get_replace_remove),
                cmocka_unit_test(test_many_with_churn),
                cmocka_unit_test(test_emptied_map_gives_its_table_back),
                cmocka_unit_test(test_one_entry_small_table),
                cmocka_unit_test(test_ensure_put),
                cmocka_unit_test(test_borrowing_keeps_the_values_keys),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
