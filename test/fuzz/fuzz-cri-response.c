/* SPDX-License-Identifier: Apache-2.0 */
/* What a container runtime answers to the runtime gate's two CRI calls
 * (csi/cri.c): a ListContainersResponse and a ListPodSandboxResponse, decoded
 * and grouped into the pods that still have a container and those with a
 * READY sandbox.
 *
 * Input: two bytes (big-endian) give the length of the containers answer;
 * the rest is the sandboxes answer. */
#include "csi/cri.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

static void check_and_free(char **uids) {
        /* Sorted and distinct, none empty. */
        for (size_t i = 0; uids[i]; i++) {
                FUZZ_ASSERT(uids[i][0] != '\0');
                FUZZ_ASSERT(i == 0 || strcmp(uids[i - 1], uids[i]) < 0);
        }
        for (size_t i = 0; uids[i]; i++)
                free(uids[i]);
        free(uids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char **running = NULL, **ready = NULL;
        size_t n;

        if (size < 2)
                return 0;
        n = MIN((size_t) data[0] << 8 | data[1], size - 2);
        data += 2;
        size -= 2;
        if (cri_running_pods(data, n, data + n, size - n, &running, &ready) < 0) {
                FUZZ_ASSERT(!running && !ready);
                return 0;
        }
        check_and_free(running);
        check_and_free(ready);
        return 0;
}
