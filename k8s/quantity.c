/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "k8s/quantity.h"
#include "systemd/macro.h"

/* Kept below 2^126 so that one more "* 10" or "* 2" cannot wrap. */
#define MANTISSA_CAP (((unsigned __int128) 1) << 122)

typedef struct Parsed {
        bool negative;
        unsigned __int128 mantissa; /* the digits, leading zeros skipped */
        bool inexact;               /* non-zero digits were dropped */
        int pow10;                  /* value = mantissa * 10^pow10 * 2^pow2 */
        int pow2;
} Parsed;

static int parse_suffix(const char *c, Parsed *q) {
        static const struct {
                const char *suffix;
                int pow10, pow2;
        } suffixes[] = {
                { "Ki", 0, 10 }, { "Mi", 0, 20 }, { "Gi", 0, 30 }, { "Ti", 0, 40 }, { "Pi", 0, 50 },
                { "Ei", 0, 60 }, { "n", -9, 0 },  { "u", -6, 0 },  { "m", -3, 0 },  { "", 0, 0 },
                { "k", 3, 0 },   { "M", 6, 0 },   { "G", 9, 0 },   { "T", 12, 0 },  { "P", 15, 0 },
                { "E", 18, 0 },
        };

        /* "E" alone is exa; "E" or "e" followed by a signed integer an exponent. */
        if ((c[0] == 'e' || c[0] == 'E') && c[1] != '\0' && strchr("+-0123456789", c[1])) {
                const char *d = c + 1;
                bool neg = false;
                int e = 0;

                if (*d == '+' || *d == '-')
                        neg = *d++ == '-';
                if (*d == '\0')
                        return -EINVAL;
                for (; *d; d++) {
                        if (*d < '0' || *d > '9')
                                return -EINVAL;
                        if (e < 100000)
                                e = e * 10 + (*d - '0');
                }
                q->pow10 += neg ? -e : e;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
                if (streq(c, suffixes[i].suffix)) {
                        q->pow10 += suffixes[i].pow10;
                        q->pow2 += suffixes[i].pow2;
                        return 0;
                }
        return -EINVAL;
}

static int parse(const char *s, Parsed *q) {
        const char *c = s;
        bool dot = false;

        *q = (Parsed) {};
        if (!s)
                return -EINVAL;
        if (*c == '+' || *c == '-')
                q->negative = *c++ == '-';
        for (; (*c >= '0' && *c <= '9') || (*c == '.' && !dot); c++) {
                if (*c == '.') {
                        dot = true;
                        continue;
                }
                if (q->mantissa >= MANTISSA_CAP) {
                        /* An integer digit more: ten times more than can be
                         * held; a fraction digit: dropped, remembered for
                         * the rounding. */
                        if (!dot)
                                return -ERANGE;
                        q->inexact = q->inexact || *c != '0';
                        continue;
                }
                q->mantissa = q->mantissa * 10 + (unsigned) (*c - '0');
                if (dot)
                        q->pow10--;
        }
        /* Digits or a dot are needed: "" and "Ki" are no quantities, "." is 0. */
        if (c == s || (c == s + 1 && (*s == '+' || *s == '-')))
                return -EINVAL;
        return parse_suffix(c, q);
}

/* mantissa * 10^(pow10 + extra10) * 2^pow2, rounded up to an integer. */
static int scale(const Parsed *q, int extra10, int64_t *ret) {
        unsigned __int128 m = q->mantissa;
        bool inexact = q->inexact;
        int p10 = q->pow10 + extra10;

        if (m == 0 && !inexact) {
                *ret = 0;
                return 0;
        }
        if (q->negative)
                return -ERANGE;
        for (int i = 0; i < q->pow2; i++) {
                if (m >= MANTISSA_CAP)
                        return -ERANGE;
                m *= 2;
        }
        for (; p10 > 0; p10--) {
                if (m >= MANTISSA_CAP)
                        return -ERANGE;
                m *= 10;
        }
        for (; p10 < 0 && m > 0; p10++) {
                inexact = inexact || m % 10 != 0;
                m /= 10;
        }
        if (inexact)
                m++;
        if (m > (unsigned __int128) INT64_MAX)
                return -ERANGE;
        *ret = (int64_t) m;
        return 0;
}

int k8s_quantity_parse(const char *s, int64_t *ret) {
        Parsed q;
        int r = parse(s, &q);
        return r < 0 ? r : scale(&q, 0, ret);
}

int k8s_quantity_parse_milli(const char *s, int64_t *ret) {
        Parsed q;
        int r = parse(s, &q);
        return r < 0 ? r : scale(&q, 3, ret);
}
