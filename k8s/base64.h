/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Standard base64 with padding, as the API encodes []byte (Secret data,
 * kubeconfig *-data).  Whitespace is ignored.  *ret is NUL-terminated (not
 * counted in *ret_size).  -EINVAL for text that is not base64. */
int k8s_base64_decode(const char *text, uint8_t **ret, size_t *ret_size);
