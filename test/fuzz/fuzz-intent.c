/* SPDX-License-Identifier: Apache-2.0 */
/* The intent records (volume/state/intent.c, kvolumed.json) that reconstruction
 * reads after a crash or reboot.  The input is the file's text. */
#include "test/fuzz/fuzz.h"
#include "volume/state/intent.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text = fuzz_strndup(data, size), *formatted = NULL, *again = NULL;
        Intent i = {}, j = {};

        if (intent_parse(text, &i) < 0) {
                free(text);
                return 0;
        }
        FUZZ_ASSERT(i.operation >= 0 && i.operation < _OP_KIND_MAX);
        FUZZ_ASSERT(strnlen(i.boot_id, sizeof i.boot_id) < sizeof i.boot_id);
        /* A record we accept, we can write back and read again the same. */
        FUZZ_ASSERT(intent_format(&i, &formatted) >= 0);
        FUZZ_ASSERT(intent_parse(formatted, &j) >= 0);
        FUZZ_ASSERT(intent_format(&j, &again) >= 0);
        FUZZ_ASSERT(streq(formatted, again));
        intent_done(&i);
        intent_done(&j);
        free(formatted);
        free(again);
        free(text);
        return 0;
}
