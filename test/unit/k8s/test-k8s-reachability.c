/* SPDX-License-Identifier: Apache-2.0 */
/* The API server's reachability as the operator is told it (one line down,
 * one line back per outage), with events handled in another order than
 * they happened, as a loaded loop does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/reachability.h"

/* Seen under parallel load: A is answered, the server goes, B is refused;
 * one turn of the loop handles B's failure then A's answer, and C (a retry)
 * fails next.  A's answer is older than B's failure: still down, one
 * warning, and one line back when a request sent since answers. */
static void test_answer_handled_after_failure(void **state) {
        K8sReachability s = {};
        uint64_t down = 0;
        unsigned failures = 0;

        unsigned a = k8s_reachability_begin(&s), b = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_failed(&s, b, "refused", 1000), K8S_REACHABILITY_DOWN);
        assert_int_equal(k8s_reachability_answered(&s, a, 1001, NULL, NULL), K8S_REACHABILITY_SAME);
        assert_int_not_equal(s.unreachable_since, 0);

        unsigned c = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_failed(&s, c, "refused again", 221000), K8S_REACHABILITY_SAME);
        assert_string_equal(s.error, "refused again");

        unsigned d = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_answered(&s, d, 500000, &down, &failures), K8S_REACHABILITY_BACK);
        assert_int_equal(down, 499000);
        assert_int_equal(failures, 2);
        assert_int_equal(s.unreachable_since, 0);
        assert_null(s.error);
        k8s_reachability_done(&s);
}

/* The mirror: a request sent while down fails after the server answered
 * again (handled late): not a second outage. */
static void test_failure_handled_after_answer(void **state) {
        K8sReachability s = {};

        unsigned a = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_failed(&s, a, "refused", 10), K8S_REACHABILITY_DOWN);
        unsigned b = k8s_reachability_begin(&s), c = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_answered(&s, b, 20, NULL, NULL), K8S_REACHABILITY_BACK);
        assert_int_equal(k8s_reachability_failed(&s, c, "refused", 30), K8S_REACHABILITY_SAME);
        assert_int_equal(s.unreachable_since, 0);

        /* A real second outage is told, once. */
        unsigned d = k8s_reachability_begin(&s), e = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_failed(&s, d, "reset", 40), K8S_REACHABILITY_DOWN);
        assert_int_equal(k8s_reachability_failed(&s, e, "reset", 41), K8S_REACHABILITY_SAME);
        unsigned f = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_answered(&s, f, 50, NULL, NULL), K8S_REACHABILITY_BACK);
        k8s_reachability_done(&s);
}

/* Answers while up and failures at start (no answer yet) are the plain case. */
static void test_in_order(void **state) {
        K8sReachability s = {};

        assert_int_equal(k8s_reachability_answered(&s, k8s_reachability_begin(&s), 1, NULL, NULL),
                         K8S_REACHABILITY_SAME);
        unsigned a = k8s_reachability_begin(&s), b = k8s_reachability_begin(&s), c = k8s_reachability_begin(&s);
        assert_int_equal(k8s_reachability_failed(&s, a, "x", 2), K8S_REACHABILITY_DOWN);
        assert_int_equal(k8s_reachability_failed(&s, b, "y", 3), K8S_REACHABILITY_SAME);
        assert_int_equal(k8s_reachability_failed(&s, c, "z", 4), K8S_REACHABILITY_SAME);
        assert_int_equal(s.failures, 3);
        assert_string_equal(s.error, "z");
        k8s_reachability_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_answer_handled_after_failure),
                cmocka_unit_test(test_failure_handled_after_answer),
                cmocka_unit_test(test_in_order),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
