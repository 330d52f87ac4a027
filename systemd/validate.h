/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Checks of names that come from outside (configuration, the API, drivers).
 * Each returns 0 when valid and -EINVAL otherwise.  They sit in the bottom
 * layer because conf/, k8s/ and csi/ all need them and may not include each other. */

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* RFC 1123 subdomain as Kubernetes checks it: ≤253 chars, lowercase
 * alphanumerics, '-' and '.', each part starting and ending alphanumeric
 * (no per-part length limit, unlike DNS). */
int validate_dns1123_subdomain(const char *s);
/* RFC 1123 label: ≤63 chars, lowercase alphanumerics and '-', alphanumeric ends. */
int validate_dns1123_label(const char *s);
/* CSI driver name (CSI spec GetPluginInfo): ≤63 chars, alphanumerics, '-',
 * '.', and alphanumeric first and last characters. */
int validate_csi_driver_name(const char *s);
/* A single path component we may create: not empty, not "." or "..", no '/',
 * no NUL (by construction), no control character, well-formed UTF-8, and at
 * most 255 bytes. */
int validate_path_component(const char *s);
/* Whether s is well-formed UTF-8 (no overlong forms, no surrogates). */
bool utf8_valid(const char *s);

/* "s" for a terminal or a log line when it comes from elsewhere (an API
 * server's answer): backslash, control characters, bytes that are not
 * UTF-8 and the Unicode characters that move the cursor or reorder text
 * written as C escapes (\n, \x1b), so that it can neither fake a line nor
 * send the terminal a sequence.  Printable UTF-8 is kept.  malloc'd; NULL
 * for NULL or on ENOMEM. */
char *escape_untrusted(const char *s);

/* An absolute, normalised path: starts with '/', no "." or ".." components,
 * no empty components ("//"), no trailing '/' (except "/" itself). */
int validate_absolute_path(const char *s);

/* "unix:///abs/path" → the path, which must be absolute and fit sun_path.
 * *ret_path points into s. */
int unix_endpoint_path(const char *s, const char **ret_path);

/* A Kubernetes UID as the API server makes them: a UUID in its 36-character
 * textual form (8-4-4-4-12 hex digits, lowercase).  Pod UIDs become path
 * components under root-dir, so nothing else is accepted. */
int validate_uid(const char *s);

/* "HOST:PORT" with a numeric IPv4 host, "[IPv6]" or "localhost" (always
 * 127.0.0.1, without asking a resolver); port 0 lets the kernel choose.
 * ret/ret_len may be NULL to only validate.  0 or -EINVAL. */
int parse_listen_address(const char *listen, struct sockaddr_storage *ret, socklen_t *ret_len);
