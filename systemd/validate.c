/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/un.h>

#include "systemd/macro.h"
#include "systemd/validate.h"

static bool is_lower_alnum(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int validate_label_span(const char *s, size_t n) {
        if (n == 0 || n > 63)
                return -EINVAL;
        if (!is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (!is_lower_alnum(s[i]) && s[i] != '-')
                        return -EINVAL;
        return 0;
}

int validate_dns1123_label(const char *s) {
        if (!s)
                return -EINVAL;
        return validate_label_span(s, strlen(s));
}

int validate_dns1123_subdomain(const char *s) {
        size_t n;

        if (!s)
                return -EINVAL;
        n = strlen(s);
        if (n == 0 || n > 253)
                return -EINVAL;
        for (const char *p = s;;) {
                const char *dot = strchr(p, '.');
                size_t len = dot ? (size_t) (dot - p) : strlen(p);
                if (validate_label_span(p, len) < 0)
                        return -EINVAL;
                if (!dot)
                        return 0;
                p = dot + 1;
        }
}

int validate_csi_driver_name(const char *s) {
        size_t n;

        if (!s)
                return -EINVAL;
        n = strlen(s);
        if (n == 0 || n > 63)
                return -EINVAL;
        if (!isalnum((unsigned char) s[0]) || !isalnum((unsigned char) s[n - 1]))
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if (!(c < 0x80 && isalnum(c)) && c != '-' && c != '.')
                        return -EINVAL;
        }
        return 0;
}

int validate_path_component(const char *s) {
        size_t n;

        if (!s)
                return -EINVAL;
        n = strlen(s);
        if (n == 0 || n > 255 || streq(s, ".") || streq(s, ".."))
                return -EINVAL;
        if (strchr(s, '/'))
                return -EINVAL;
        return 0;
}

int validate_absolute_path(const char *s) {
        if (!s || s[0] != '/')
                return -EINVAL;
        if (streq(s, "/"))
                return 0;
        if (strlen(s) >= 4096)
                return -EINVAL;
        for (const char *p = s + 1;;) {
                const char *slash = strchr(p, '/');
                size_t len = slash ? (size_t) (slash - p) : strlen(p);
                if (len == 0) /* "//" or a trailing '/' */
                        return -EINVAL;
                if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
                        return -EINVAL;
                if (!slash)
                        return 0;
                p = slash + 1;
        }
}

int unix_endpoint_path(const char *s, const char **ret_path) {
        const char *path;

        if (!s || strncmp(s, "unix://", 7) != 0)
                return -EINVAL;
        path = s + 7;
        if (validate_absolute_path(path) < 0 || streq(path, "/"))
                return -EINVAL;
        if (strlen(path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path))
                return -ENAMETOOLONG;
        if (ret_path)
                *ret_path = path;
        return 0;
}
