/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "volume/state/backoff.h"

static void test_kubelet_sequence(void **state) {
        Backoff b = {};
        uint64_t now = 1000 * USEC_PER_SEC;
        const uint64_t want_ms[] = { 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 122000, 122000 };

        assert_true(backoff_allows(&b, now));
        assert_int_equal(backoff_next_try(&b), 0);
        for (size_t i = 0; i < ELEMENTSOF(want_ms); i++) {
                backoff_failed(&b, now);
                assert_int_equal(b.duration_usec, want_ms[i] * USEC_PER_MSEC);
                assert_false(backoff_allows(&b, now + want_ms[i] * USEC_PER_MSEC - 1));
                assert_true(backoff_allows(&b, now + want_ms[i] * USEC_PER_MSEC));
                now += want_ms[i] * USEC_PER_MSEC;
        }
        backoff_reset(&b);
        assert_true(backoff_allows(&b, 0));
        backoff_failed(&b, now);
        assert_int_equal(b.duration_usec, BACKOFF_INITIAL_USEC);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_kubelet_sequence) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
