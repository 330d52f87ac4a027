/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "systemd/macro.h"
#include "systemd/secure-file.h"

/* Root, or the user kvolumed runs as: a file only that user can write gives
 * it nothing it does not have (a build running the unit tests as itself). */
static bool trusted_owner(uid_t uid) {
        return uid == 0 || uid == geteuid();
}

static const char *type_name(mode_t mode) {
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISFIFO(mode))
                return "a FIFO";
        if (S_ISSOCK(mode))
                return "a socket";
        if (S_ISCHR(mode))
                return "a character device";
        if (S_ISBLK(mode))
                return "a block device";
        return "not a regular file";
}

static int refuse_type(const char *path, mode_t mode, bool directory, char **ret_error) {
        if (directory)
                return -ENOTDIR; /* as open(O_DIRECTORY) says: the caller's to judge */
        if (ret_error && asprintf(ret_error,
                                  "%s: cannot read: %s, not a regular file; configuration is read "
                                  "from regular files only (remove it, or make it one)",
                                  path, type_name(mode)) < 0)
                return -ENOMEM;
        return -EPERM;
}

static int refuse(const char *path, const struct stat *st, const char *problem, const char *file,
                  char **ret_error) {
        if (ret_error && asprintf(ret_error,
                                  "%s: %s (mode %04o, owner uid %u)%s%s: refusing configuration that "
                                  "a user other than root could change; make it root's and writable by root "
                                  "alone (chown root, chmod go-w)",
                                  path, problem, (unsigned) (st->st_mode & 07777), (unsigned) st->st_uid,
                                  file ? ", above " : "", strempty(file)) < 0)
                return -ENOMEM;
        return -EPERM;
}

/* "sticky_ok": a world-writable directory above the file passes if it has
 * the sticky bit and is root's (/tmp); see secure-file.h. */
static int check_stat(const char *path, const struct stat *st, bool sticky_ok, const char *file,
                      char **ret_error) {
        bool owner_ok = trusted_owner(st->st_uid);
        mode_t w = st->st_mode & (S_IWGRP | S_IWOTH);
        char problem[96];

        if (w && sticky_ok && owner_ok && S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX))
                w = 0;
        if (owner_ok && !w)
                return 0;
        snprintf(problem, sizeof problem, "%s%s%s", owner_ok ? "" : "not owned by root",
                 !owner_ok && w ? " and " : "",
                 w == (S_IWGRP | S_IWOTH) ? "writable by its group and by others"
                 : w == S_IWGRP           ? "writable by its group"
                 : w                      ? "writable by others"
                                          : "");
        return refuse(path, st, problem, file, ret_error);
}

/* A symlink is not itself writable, but whoever owns it may replace it where
 * the directory's sticky bit would otherwise keep others out. */
static int check_entry(const char *path, const char *file, char **ret_error) {
        struct stat st;

        if (lstat(path, &st) < 0)
                return -errno;
        if (S_ISLNK(st.st_mode)) {
                if (!trusted_owner(st.st_uid))
                        return refuse(path, &st, "a symlink not owned by root", file, ret_error);
                if (stat(path, &st) < 0)
                        return -errno;
        }
        return file ? check_stat(path, &st, true, file, ret_error) : 0;
}

/* Every directory above "path" (absolute), from / down. */
static int check_parents(const char *path, const char *file, char **ret_error) {
        _cleanup_free_ char *copy = strdup(path);
        size_t end;
        int r;

        if (!copy)
                return -ENOMEM;
        end = (size_t) (strrchr(copy, '/') - copy);
        r = check_entry("/", file, ret_error);
        for (size_t i = 1; r >= 0 && i <= end; i++) {
                if (copy[i] != '/' || copy[i - 1] == '/')
                        continue;
                copy[i] = '\0';
                r = check_entry(copy, file, ret_error);
                copy[i] = '/';
        }
        return r;
}

static char *absolute_path(const char *path) {
        _cleanup_free_ char *cwd = NULL;
        char *abs;

        if (path[0] == '/')
                return strdup(path);
        cwd = getcwd(NULL, 0);
        if (!cwd)
                return NULL;
        return asprintf(&abs, "%s/%s", cwd, path) < 0 ? NULL : abs;
}

/* Where the opened file is, every symlink resolved: the kernel's answer for
 * the descriptor, so no rename between open() and here can fool it. */
static char *fd_path(int fd, const char *path) {
        char proc[64], buf[PATH_MAX];
        ssize_t n;

        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        n = readlink(proc, buf, sizeof buf - 1);
        if (n <= 0 || buf[0] != '/')
                return realpath(path, NULL); /* no /proc: second best */
        buf[n] = '\0';
        return strdup(buf);
}

int secure_open(const char *path, bool directory, char **ret_error) {
        _cleanup_free_ char *abs = NULL, *resolved = NULL;
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        int r;

        /* Not even opened when it is no regular file: opening a FIFO for
         * reading blocks until a writer comes, a device's open has effects. */
        if (stat(path, &st) >= 0 && (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
                return refuse_type(path, st.st_mode, directory, ret_error);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (directory ? O_DIRECTORY : 0));
        if (fd < 0)
                return -errno;
        /* What was opened is what is judged (and then read). */
        if (fstat(fd, &st) < 0)
                return -errno;
        if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
                return refuse_type(path, st.st_mode, directory, ret_error);
        r = check_stat(path, &st, false, NULL, ret_error);
        if (r < 0)
                return r;

        abs = absolute_path(path);
        if (!abs)
                return -ENOMEM;
        r = check_entry(abs, NULL, ret_error);
        if (r >= 0)
                r = check_parents(abs, path, ret_error);
        if (r < 0)
                return r;
        resolved = fd_path(fd, path);
        if (!resolved)
                return -errno;
        if (!streq(resolved, abs)) {
                r = check_parents(resolved, path, ret_error);
                if (r < 0)
                        return r;
        }
        if (!directory && fcntl(fd, F_SETFL, 0) < 0) /* O_NONBLOCK served its purpose */
                return -errno;
        return TAKE_FD(fd);
}
