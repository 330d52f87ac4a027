/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Shared by the libFuzzer targets of test/fuzz: each fuzz-<name>.c defines
 * LLVMFuzzerTestOneInput() for one decoder of input that comes from outside
 * kvolumed (the API server, a CSI driver, a registrar, a file on disk). */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "systemd/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The decoders log what they refuse; at a million inputs a minute that is
 * only noise on the fuzzer's output. */
static inline void fuzz_quiet_logs(void) {
        log_set_max_level(LOG_EMERG);
}

/* The decoders that take C strings get the input as one, NUL included; the
 * copy is exactly as long, so ASan sees any read past the end. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size) {
        char *s = malloc(size + 1);
        if (!s)
                abort();
        if (size > 0)
                memcpy(s, data, size);
        s[size] = 0;
        return s;
}

/* A failed invariant is a finding: abort() makes libFuzzer save the input. */
#define FUZZ_ASSERT(expr)                                                                                  \
        do {                                                                                               \
                if (!(expr)) {                                                                             \
                        fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #expr);       \
                        abort();                                                                           \
                }                                                                                          \
        } while (0)
