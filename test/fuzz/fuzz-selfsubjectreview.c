/* SPDX-License-Identifier: Apache-2.0 */
/* The API server's SelfSubjectReview answer (k8s/identity.c): who it says
 * kvolumed is, read at every start.  The input is the response body. */
#include "k8s/identity.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        K8sIdentity id = { .result = K8S_IDENTITY_FAILED };
        char *text = malloc(size ? size : 1), *who;
        const char *node;
        int r;

        FUZZ_ASSERT(text);
        if (size > 0)
                memcpy(text, data, size);
        r = k8s_identity_decode(text, size, &id);
        if (r < 0) {
                FUZZ_ASSERT(!id.user && !id.groups);
                FUZZ_ASSERT(id.result == K8S_IDENTITY_FAILED);
        } else {
                FUZZ_ASSERT(id.result == K8S_IDENTITY_KNOWN && id.user);
                node = k8s_identity_node_name(&id);
                FUZZ_ASSERT(!node || (node >= id.user && node <= id.user + strlen(id.user)));
                who = k8s_identity_to_string(&id);
                FUZZ_ASSERT(who);
                free(who);
        }
        k8s_identity_done(&id);
        free(text);
        return 0;
}
