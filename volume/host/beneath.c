/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include "systemd/macro.h"
#include "volume/host/beneath.h"

/* The kernel's limit on links followed in one resolution (MAXSYMLINKS). */
#define LINKS_MAX 40

#if KVOLUMED_TEST_HOOKS
bool beneath_test_no_openat2 = false;
#endif

/* The directories walked so far, the last one being where we are; empty
 * means dirfd itself (not ours to close). */
typedef struct Walk {
        int dirfd;
        int *fds;
        size_t n, size;
} Walk;

static void walk_done(Walk *w) {
        for (size_t i = 0; i < w->n; i++)
                close(w->fds[i]);
        free(w->fds);
}

static int walk_cur(const Walk *w) {
        return w->n > 0 ? w->fds[w->n - 1] : w->dirfd;
}

static int walk_push(Walk *w, int fd) {
        if (w->n == w->size) {
                size_t size = w->size ? w->size * 2 : 16;
                int *fds = realloc(w->fds, size * sizeof *fds);
                if (!fds) {
                        close(fd);
                        return -ENOMEM;
                }
                w->fds = fds;
                w->size = size;
        }
        w->fds[w->n++] = fd;
        return 0;
}

/* Where the walk ended, as a descriptor opened with flags: the O_PATH one
 * itself, or opened again through /proc/self/fd for other flags. */
static int walk_result(Walk *w, int flags) {
        _cleanup_close_ int fd = -1;
        char proc[64];
        int r;

        if (w->n > 0)
                fd = w->fds[--w->n];
        else {
                fd = openat(w->dirfd, ".", O_PATH | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
        }
        if (flags & O_PATH)
                return TAKE_FD(fd);
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        r = open(proc, (flags & ~O_NOFOLLOW) | O_CLOEXEC);
        return r < 0 ? -errno : r;
}

/* "1234" or "1234/task/1234". */
static bool proc_plain_link(const char *t) {
        size_t n = strspn(t, "0123456789");
        if (n == 0)
                return false;
        if (t[n] == '\0')
                return true;
        if (strncmp(t + n, "/task/", 6) != 0)
                return false;
        t += n + 6;
        n = strspn(t, "0123456789");
        return n > 0 && t[n] == '\0';
}

static int walk_by_hand(int dirfd, const char *path, int flags, bool follow_symlinks) {
        _cleanup_free_ char *todo = strdup(path);
        Walk w = { .dirfd = dirfd };
        bool want_dir = *path && path[strlen(path) - 1] == '/';
        unsigned links = 0;
        int r;

        if (!todo)
                return -ENOMEM;
        for (char *p = todo; p;) {
                char *slash = strchr(p, '/'), *comp = p;
                struct stat st;
                int fd;

                if (slash)
                        *slash = '\0';
                p = slash ? slash + 1 : NULL;
                if (*comp == '\0' || streq(comp, "."))
                        continue;
                if (streq(comp, "..")) {
                        if (w.n == 0) {
                                r = -EXDEV;
                                goto fail;
                        }
                        close(w.fds[--w.n]);
                        continue;
                }
                fd = openat(walk_cur(&w), comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        r = -errno;
                        goto fail;
                }
                if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        close(fd);
                        goto fail;
                }
                bool last = !p || strspn(p, "/") == strlen(p);
                if (S_ISLNK(st.st_mode) && !(last && (flags & O_NOFOLLOW) && (flags & O_PATH))) {
                        char target[PATH_MAX + 1], *next;
                        struct statfs sfs;
                        ssize_t len;

                        if (!follow_symlinks || ++links > LINKS_MAX) {
                                close(fd);
                                r = -ELOOP;
                                goto fail;
                        }
                        len = readlinkat(fd, "", target, sizeof target - 1);
                        if (len < 0 || (size_t) len >= sizeof target - 1) {
                                r = len < 0 ? -errno : -ENAMETOOLONG;
                                close(fd);
                                goto fail;
                        }
                        target[len] = '\0';
                        /* procfs: its plain links ("self", "thread-self") name a
                         * process by number; any other link there is magic
                         * (fd/N, root, cwd, exe, ns/...), never followed. */
                        if (fstatfs(fd, &sfs) == 0 && sfs.f_type == PROC_SUPER_MAGIC &&
                            !proc_plain_link(target)) {
                                close(fd);
                                r = -ELOOP;
                                goto fail;
                        }
                        close(fd);
                        if (target[0] == '/') {
                                r = -EXDEV;
                                goto fail;
                        }
                        /* The link's target, then what was left of the path. */
                        if (asprintf(&next, "%s/%s", target, p ? p : "") < 0) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        free(todo);
                        todo = next;
                        p = todo;
                        continue;
                }
                r = walk_push(&w, fd);
                if (r < 0)
                        goto fail;
        }
        if (want_dir) {
                struct stat st;
                if (fstatat(walk_cur(&w), "", &st, AT_EMPTY_PATH) < 0 || !S_ISDIR(st.st_mode)) {
                        r = -ENOTDIR;
                        goto fail;
                }
        }
        r = walk_result(&w, flags);
fail:
        walk_done(&w);
        return r;
}

/* No symlink at all: every directory on the way opened O_NOFOLLOW from the
 * previous one, the last component with the caller's flags (O_CREAT too). */
static int walk_no_symlinks(int dirfd, const char *path, int flags, mode_t mode) {
        _cleanup_free_ char *copy = strdup(path);
        _cleanup_close_ int cur = -1;
        char *last, *slash;
        int fd;

        if (!copy)
                return -ENOMEM;
        last = copy;
        for (char *p = copy; (slash = strchr(p, '/')); p = slash + 1) {
                *slash = '\0';
                last = slash + 1;
                if (*p == '\0' || streq(p, "."))
                        continue;
                if (streq(p, ".."))
                        return -EXDEV;
                fd = openat(cur >= 0 ? cur : dirfd, p, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        return errno == ENOTDIR ? -ELOOP : -errno;
                closep(&cur);
                cur = fd;
        }
        if (streq(last, ".."))
                return -EXDEV;
        fd = openat(cur >= 0 ? cur : dirfd, *last ? last : ".", flags | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0)
                return errno == ENOTDIR && !(flags & O_DIRECTORY) ? -ELOOP : -errno;
        return fd;
}

int open_beneath(int dirfd, const char *path, int flags, mode_t mode, bool follow_symlinks) {
        struct open_how how = {
                .flags = (uint64_t) flags | O_CLOEXEC,
                .mode = (flags & O_CREAT) ? mode : 0,
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                           (follow_symlinks ? 0 : RESOLVE_NO_SYMLINKS),
        };
        bool by_hand = false;
        long fd;

        if (!path || (follow_symlinks && (flags & O_CREAT)))
                return -EINVAL;
#if KVOLUMED_TEST_HOOKS
        by_hand = beneath_test_no_openat2;
#endif
        if (!by_hand) {
                fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
                if (fd >= 0 || errno != ENOSYS)
                        return fd < 0 ? -errno : (int) fd;
        }
        return follow_symlinks ? walk_by_hand(dirfd, path, flags, true)
                               : walk_no_symlinks(dirfd, path, flags, mode);
}

int dir_list_open(int dfd, DIR **ret) {
        int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
        DIR *d;

        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        *ret = d;
        return 0;
}
