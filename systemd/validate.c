/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <stdlib.h>
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

/* As Kubernetes' IsDNS1123Subdomain: the pattern per dot-separated part and
 * 253 characters in all, but no 63-character limit per part — object names
 * such as "csi-" + 64 hex digits (VolumeAttachments) are valid. */
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
                if (len == 0 || !is_lower_alnum(p[0]) || !is_lower_alnum(p[len - 1]))
                        return -EINVAL;
                for (size_t i = 0; i < len; i++)
                        if (!is_lower_alnum(p[i]) && p[i] != '-')
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

/* The length of the valid UTF-8 sequence at s, 0 when it is none. */
static size_t utf8_char_len(const unsigned char *s) {
        if (s[0] < 0x80)
                return 1;
        if (s[0] >= 0xc2 && s[0] <= 0xdf && (s[1] & 0xc0) == 0x80)
                return 2;
        if (s[0] >= 0xe0 && s[0] <= 0xef && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
            !(s[0] == 0xe0 && s[1] < 0xa0) && !(s[0] == 0xed && s[1] > 0x9f))
                return 3;
        if (s[0] >= 0xf0 && s[0] <= 0xf4 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
            (s[3] & 0xc0) == 0x80 && !(s[0] == 0xf0 && s[1] < 0x90) && !(s[0] == 0xf4 && s[1] > 0x8f))
                return 4;
        return 0;
}

bool utf8_valid(const char *str) {
        for (const unsigned char *s = (const unsigned char *) str; *s;) {
                size_t n = utf8_char_len(s);
                if (n == 0)
                        return false;
                s += n;
        }
        return true;
}

/* Characters a terminal acts on rather than shows: C1 controls (U+0080 to
 * U+009F; some terminals read U+009B as CSI), the line and paragraph
 * separators, and the bidirectional formatting characters that reorder
 * what is shown. */
static bool unicode_control(const unsigned char *s, size_t n) {
        uint32_t c;

        if (n == 2)
                c = (uint32_t) (s[0] & 0x1f) << 6 | (s[1] & 0x3f);
        else if (n == 3)
                c = (uint32_t) (s[0] & 0x0f) << 12 | (uint32_t) (s[1] & 0x3f) << 6 | (s[2] & 0x3f);
        else
                return false;
        return (c >= 0x80 && c <= 0x9f) || c == 0x061c || c == 0x200e || c == 0x200f ||
               (c >= 0x2028 && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

char *escape_untrusted(const char *str) {
        char *text = NULL;
        size_t size = 0;
        FILE *f;

        if (!str)
                return NULL;
        f = open_memstream(&text, &size);
        if (!f)
                return NULL;
        for (const unsigned char *s = (const unsigned char *) str; *s;) {
                size_t n = utf8_char_len(s);

                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else if (*s == '\r')
                        fputs("\\r", f);
                else if (*s == '\t')
                        fputs("\\t", f);
                else if (n == 1 && *s >= 0x20 && *s < 0x7f)
                        fputc(*s, f);
                else if (n > 1 && !unicode_control(s, n)) {
                        fwrite(s, 1, n, f);
                        s += n;
                        continue;
                } else
                        for (size_t i = 0; i < MAX(n, (size_t) 1); i++)
                                fprintf(f, "\\x%02x", s[i]);
                s += MAX(n, (size_t) 1);
        }
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
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
        /* Control characters (newlines in logs and mountinfo, escapes in
         * terminals) and bytes that are not UTF-8 have no place in a name
         * the API validated; one that has them did not come from it. */
        for (const char *c = s; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        return -EINVAL;
        if (!utf8_valid(s))
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

int validate_uid(const char *s) {
        if (!s || strlen(s) != 36)
                return -EINVAL;
        for (size_t i = 0; i < 36; i++) {
                char c = s[i];
                if (i == 8 || i == 13 || i == 18 || i == 23) {
                        if (c != '-')
                                return -EINVAL;
                } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return -EINVAL;
        }
        return 0;
}

int parse_listen_address(const char *listen, struct sockaddr_storage *ret, socklen_t *ret_len) {
        struct sockaddr_storage unused;
        socklen_t unused_len;
        _cleanup_free_ char *host = NULL;
        const char *port;
        char *end;
        unsigned long p;

        if (isempty(listen))
                return -EINVAL;
        if (listen[0] == '[') {
                const char *close = strchr(listen, ']');
                if (!close || close[1] != ':')
                        return -EINVAL;
                host = strndup(listen + 1, close - listen - 1);
                port = close + 2;
        } else {
                const char *colon = strrchr(listen, ':');
                if (!colon)
                        return -EINVAL;
                host = strndup(listen, colon - listen);
                port = colon + 1;
        }
        if (!host)
                return -ENOMEM;
        if (!isdigit((unsigned char) port[0]))
                return -EINVAL;
        errno = 0;
        p = strtoul(port, &end, 10);
        if (errno != 0 || *end || p > 65535)
                return -EINVAL;

        if (!ret)
                ret = &unused;
        if (!ret_len)
                ret_len = &unused_len;
        *ret = (struct sockaddr_storage){};
        if (listen[0] == '[') {
                struct sockaddr_in6 *sa = (struct sockaddr_in6 *) ret;
                if (inet_pton(AF_INET6, host, &sa->sin6_addr) != 1)
                        return -EINVAL;
                sa->sin6_family = AF_INET6;
                sa->sin6_port = htons((uint16_t) p);
                *ret_len = sizeof *sa;
        } else {
                struct sockaddr_in *sa = (struct sockaddr_in *) ret;
                /* No resolver on purpose: "localhost" is loopback, whatever /etc/hosts says. */
                if (streq(host, "localhost"))
                        sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
                        return -EINVAL;
                sa->sin_family = AF_INET;
                sa->sin_port = htons((uint16_t) p);
                *ret_len = sizeof *sa;
        }
        return 0;
}
