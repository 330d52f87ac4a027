/* SPDX-License-Identifier: Apache-2.0 */
/* vol_data.json (volume/state/voldata.c), ours or a kubelet's, as reconstruction
 * reads it after a restart.  The input is the file's text. */
#include "test/fuzz/fuzz.h"
#include "volume/state/voldata.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text = fuzz_strndup(data, size), *formatted = NULL, *again = NULL, *third = NULL;
        VolData d = {}, e = {}, f = {};

        if (vol_data_parse(text, &d) < 0) {
                free(text);
                return 0;
        }
        /* What we read, we write back as kubelet would and can read again.  The
         * first write may change the values as Go does (invalid UTF-8 becomes
         * "\ufffd", read back as U+FFFD itself); from then on nothing changes. */
        FUZZ_ASSERT(vol_data_format(&d, &formatted) >= 0);
        FUZZ_ASSERT(vol_data_parse(formatted, &e) >= 0);
        FUZZ_ASSERT(vol_data_format(&e, &again) >= 0);
        FUZZ_ASSERT(vol_data_parse(again, &f) >= 0);
        FUZZ_ASSERT(vol_data_format(&f, &third) >= 0);
        FUZZ_ASSERT(streq(again, third));
        vol_data_done(&d);
        vol_data_done(&e);
        vol_data_done(&f);
        free(formatted);
        free(again);
        free(third);
        free(text);
        return 0;
}
