/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The switches the test suite sets in kvolumed's environment (a stalled event
 * loop for the watchdog, a shorter fsGroup stall limit, a stand-in selinuxfs,
 * a check after every scoped pass, a slow root-dir, the syncfs rule
 * the durability bench compares against, a sync held between its rounds).  They exist only in a build with
 * -Dtest-hooks=true (test/lib/common.sh's builds): a release build and the
 * Debian package do not even contain their names, so no environment a unit,
 * a drop-in or a container image passes can make a node's agent block its
 * loop or trust a fake selinuxfs. */

#include <errno.h>
#include <stdlib.h>

#if KVOLUMED_TEST_HOOKS
#  define test_hook_getenv(name) getenv("KVOLUMED_TEST_" name)
#else
#  define test_hook_getenv(name) ((const char *) NULL)
#endif

/* A positive whole number from the switch KVOLUMED_TEST_<name>, or
 * `fallback` when it is unset (always, in a release build) or not one. */
#define test_hook_ulong(name, fallback) test_hook_parse_ulong(test_hook_getenv(name), (fallback))

static inline unsigned long test_hook_parse_ulong(const char *value, unsigned long fallback) {
        unsigned long n;
        char *end;

        if (!value || !*value)
                return fallback;
        errno = 0;
        n = strtoul(value, &end, 10);
        return errno == 0 && *end == '\0' && n > 0 ? n : fallback;
}
