/* SPDX-License-Identifier: Apache-2.0 */
/* The INI configuration (conf/config.c) from memory, as config_load() reads
 * a file's text.  The input is the file's text. */
#include <stdio.h>

#include "conf/config.h"
#include "test/fuzz/fuzz.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        devnull = fopen("/dev/null", "we");
        FUZZ_ASSERT(devnull);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text = fuzz_strndup(data, size);
        Config *c = NULL;
        char *error = NULL;
        int r;

        r = config_parse_string(text, "fuzz.conf", &c, &error);
        if (r < 0) {
                FUZZ_ASSERT(!c);
                FUZZ_ASSERT(r == -EINVAL || r == -ENOMEM);
                FUZZ_ASSERT(r == -ENOMEM || error);
        } else {
                FUZZ_ASSERT(c && !error);
                FUZZ_ASSERT(!isempty(c->node_name));
                for (size_t i = 0; i < c->n_drivers; i++)
                        FUZZ_ASSERT(config_find_driver(c, c->drivers[i].name));
                config_print(c, devnull);
        }
        config_free(c);
        free(error);
        free(text);
        return 0;
}
