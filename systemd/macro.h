/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Small helpers in systemd's style, shared by every module: owned resources are
 * released by _cleanup_ attributes, free functions return NULL so that
 * "p = x_free(p);" leaves no dangling pointer. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))
#define _likely_(x) (__builtin_expect(!!(x), 1))
#define _unlikely_(x) (__builtin_expect(!!(x), 0))
#define _warn_unused_result_ __attribute__((warn_unused_result))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#define USEC_PER_SEC ((uint64_t) 1000000)
#define USEC_PER_MSEC ((uint64_t) 1000)
#define USEC_PER_MINUTE ((uint64_t) 60000000)
#define USEC_PER_HOUR ((uint64_t) 3600000000)

/* Declares a function "name##p" suitable for _cleanup_(), calling "func" on *p. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                            \
        static inline void func##p(type *p) {                                                              \
                if (*p)                                                                                    \
                        func(*p);                                                                          \
        }

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                (void) close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

/* Moves ownership out of a _cleanup_ variable. */
#define TAKE_PTR(p)                                                                                        \
        ({                                                                                                 \
                __typeof__(p) _taken = (p);                                                                \
                (p) = NULL;                                                                                \
                _taken;                                                                                    \
        })
#define TAKE_FD(fd)                                                                                        \
        ({                                                                                                 \
                int _taken_fd = (fd);                                                                      \
                (fd) = -1;                                                                                 \
                _taken_fd;                                                                                 \
        })

static inline const char *strempty(const char *s) {
        return s ? s : "";
}
static inline int isempty(const char *s) {
        return !s || !*s;
}
static inline int streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}
#define streq(a, b) (strcmp((a), (b)) == 0)

/* *ret = a copy of s, or NULL when s is NULL. */
static inline int strdup_or_null(const char *s, char **ret) {
        *ret = s ? strdup(s) : NULL;
        return s && !*ret ? -ENOMEM : 0;
}

/* Replaces *p by a copy of s (or NULL), freeing the old value. */
static inline int free_and_strdup(char **p, const char *s) {
        char *copy = NULL;
        if (s) {
                copy = strdup(s);
                if (!copy)
                        return -ENOMEM;
        }
        free(*p);
        *p = copy;
        return 0;
}

static inline char *mfree_str(char *p) {
        free(p);
        return NULL;
}

#include <stdio.h>
static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

/* Exchanges two lvalues of the same type. */
#define SWAP_TWO(a, b)                      \
        do {                                \
                __typeof__(a) _swap_t = (a); \
                (a) = (b);                  \
                (b) = _swap_t;              \
        } while (false)
