/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* TEST ONLY — where a new pod's time goes between its watch event and its
 * CSI call.  With KVOLUMED_TEST_TRACE_FILE=PATH, each step appends a line
 * "REALTIME_USEC STEP KEY" to PATH (KEY: the pod's UID, or an operation's
 * CSI method); test/bench/mount_bench.py --trace reads it to give each step
 * its share.  The wall clock, so that the lines compare with the fake API
 * server's and the mock driver's own stamps.  Like every test hook it exists
 * only in a -Dtest-hooks=true build: a release build has no such code. */

#include <stdint.h>

#if KVOLUMED_TEST_HOOKS
uint64_t test_trace_now(void);
void test_trace_at(uint64_t realtime_usec, const char *step, const char *key);
static inline void test_trace(const char *step, const char *key) {
        test_trace_at(0, step, key);
}
#else
static inline uint64_t test_trace_now(void) {
        return 0;
}
static inline void test_trace_at(uint64_t realtime_usec, const char *step, const char *key) {
}
static inline void test_trace(const char *step, const char *key) {
}
#endif
