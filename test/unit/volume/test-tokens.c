/* SPDX-License-Identifier: Apache-2.0 */
/* The pure parts of tokens.c and republish.c: the expiry times the API
 * server gives, and the republish schedule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "volume/internal.h"

static void test_rfc3339(void **state) {
        time_t t = 0;

        assert_int_equal(tokens_parse_rfc3339("1970-01-01T00:00:00Z", &t), 0);
        assert_int_equal(t, 0);
        assert_int_equal(tokens_parse_rfc3339("2024-05-01T10:00:00Z", &t), 0);
        assert_int_equal(t, 1714557600);
        /* Fractions are dropped, offsets applied: the same instant. */
        assert_int_equal(tokens_parse_rfc3339("2024-05-01T12:00:00.987654+02:00", &t), 0);
        assert_int_equal(t, 1714557600);
        assert_int_equal(tokens_parse_rfc3339("2024-05-01T09:30:00-00:30", &t), 0);
        assert_int_equal(t, 1714557600);

        t = 42;
        assert_int_equal(tokens_parse_rfc3339("2024-05-01 10:00:00Z", &t), -EINVAL);
        assert_int_equal(tokens_parse_rfc3339("2024-05-01T10:00:00", &t), -EINVAL);
        assert_int_equal(tokens_parse_rfc3339("2024-05-01T10:00:00Zjunk", &t), -EINVAL);
        assert_int_equal(tokens_parse_rfc3339("2024-13-01T10:00:00Z", &t), -EINVAL);
        assert_int_equal(tokens_parse_rfc3339("2024-05-01T10:00:00+0200", &t), -EINVAL);
        assert_int_equal(tokens_parse_rfc3339("", &t), -EINVAL);
        assert_int_equal(tokens_parse_rfc3339(NULL, &t), -EINVAL);
        assert_int_equal(t, 42);
}

static void test_republish_interval_and_jitter(void **state) {
        const uint64_t now = 1000 * USEC_PER_SEC, interval = 60 * USEC_PER_SEC, real = 5000 * USEC_PER_SEC;

        /* No token: the interval, up to "spread" of it early. */
        assert_int_equal(republish_next(now, interval, 0.25, real, UINT64_MAX, 0.0), now + interval);
        assert_int_equal(republish_next(now, interval, 0.25, real, UINT64_MAX, 0.5), now + interval - interval / 8);
        assert_int_equal(republish_next(now, interval, 0.5, real, UINT64_MAX, 1.0), now + interval / 2);
        for (double r = 0.0; r < 1.0; r += 0.01) {
                uint64_t next = republish_next(now, interval, 0.25, real, UINT64_MAX, r);
                assert_true(next <= now + interval);
                assert_true(next >= now + interval - interval / 4);
        }
}

static void test_republish_token_due(void **state) {
        const uint64_t now = 1000 * USEC_PER_SEC, interval = 60 * USEC_PER_SEC, real = 5000 * USEC_PER_SEC;

        /* A token due before the interval ends brings the republish forward ... */
        assert_int_equal(republish_next(now, interval, 0.25, real, real + 8 * USEC_PER_SEC, 0.0),
                         now + 8 * USEC_PER_SEC);
        /* ... to now when it is due already ... */
        assert_int_equal(republish_next(now, interval, 0.25, real, real - USEC_PER_SEC, 0.0), now);
        /* ... and never later than the interval. */
        assert_int_equal(republish_next(now, interval, 0.25, real, real + 3600 * USEC_PER_SEC, 0.0), now + interval);
        assert_int_equal(tokens_refresh_due_realtime(NULL, 0.5), UINT64_MAX);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rfc3339),
                cmocka_unit_test(test_republish_interval_and_jitter),
                cmocka_unit_test(test_republish_token_due),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
