/* SPDX-License-Identifier: Apache-2.0 */
#include <openssl/evp.h>
#include <string.h>

#include "k8s/base64.h"
#include "systemd/macro.h"

int k8s_base64_decode(const char *text, uint8_t **ret, size_t *ret_size) {
        _cleanup_free_ char *clean = NULL;
        _cleanup_free_ uint8_t *out = NULL;
        size_t n = 0, len = strlen(text), pad = 0;
        int r;

        if (len > INT32_MAX / 2)
                return -EFBIG;
        clean = malloc(len + 1);
        if (!clean)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++)
                if (!strchr(" \t\r\n", text[i]))
                        clean[n++] = text[i];
        clean[n] = '\0';
        if (n % 4 != 0)
                return -EINVAL;
        if (n >= 1 && clean[n - 1] == '=')
                pad++;
        if (n >= 2 && clean[n - 2] == '=')
                pad++;
        out = malloc(n / 4 * 3 + 1);
        if (!out)
                return -ENOMEM;
        r = n == 0 ? 0 : EVP_DecodeBlock(out, (const unsigned char *) clean, (int) n);
        if (r < 0 || (size_t) r < pad) {
                explicit_bzero(clean, n);
                return -EINVAL;
        }
        explicit_bzero(clean, n);
        out[r - pad] = '\0';
        *ret_size = (size_t) r - pad;
        *ret = TAKE_PTR(out);
        return 0;
}
