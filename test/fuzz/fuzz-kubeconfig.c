/* SPDX-License-Identifier: Apache-2.0 */
/* Kubeconfig files (k8s/auth.c): YAML, then the current context's cluster and
 * user.  The input is the file's text. */
#include "k8s/auth.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* Exactly the input's bytes: the parser is given a length, not a C string. */
        char *text = malloc(size ? size : 1);
        K8sAuth *a = NULL;
        char *error = NULL;
        int r;

        FUZZ_ASSERT(text);
        if (size > 0)
                memcpy(text, data, size);
        r = k8s_auth_from_kubeconfig_string(text, size, "/etc/kubernetes", &a, &error);
        if (r < 0) {
                FUZZ_ASSERT(!a);
                FUZZ_ASSERT(r == -EINVAL || r == -ENOMEM);
                FUZZ_ASSERT(r == -ENOMEM || error);
        } else {
                FUZZ_ASSERT(a && !error);
                FUZZ_ASSERT(a->server);
                /* Relative paths were resolved against the kubeconfig's directory. */
                FUZZ_ASSERT(!a->ca_file || a->ca_file[0] == '/');
                FUZZ_ASSERT(!a->token_file || a->token_file[0] == '/');
                FUZZ_ASSERT(!a->client_cert_file || a->client_cert_file[0] == '/');
                FUZZ_ASSERT(!a->client_key_file || a->client_key_file[0] == '/');
        }
        k8s_auth_free(a);
        free(error);
        free(text);
        return 0;
}
