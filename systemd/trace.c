/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "systemd/testhook.h"
#include "systemd/trace.h"

#if KVOLUMED_TEST_HOOKS
static int trace_fd = -2; /* -2: not opened yet; -1: off */

uint64_t test_trace_now(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000000ULL + (uint64_t) ts.tv_nsec / 1000ULL;
}

void test_trace_at(uint64_t realtime_usec, const char *step, const char *key) {
        char line[256];
        int n;

        if (trace_fd == -2) {
                const char *path = test_hook_getenv("TRACE_FILE");
                trace_fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600) : -1;
        }
        if (trace_fd < 0)
                return;
        if (realtime_usec == 0)
                realtime_usec = test_trace_now();
        n = snprintf(line, sizeof line, "%llu %s %s\n", (unsigned long long) realtime_usec, step, key ? key : "-");
        if (n > 0 && (size_t) n < sizeof line)
                (void) write(trace_fd, line, (size_t) n); /* one append: lines from threads do not mix */
}
#endif
