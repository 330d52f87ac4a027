/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/apisocket.h"
#include "systemd/errormsg.h"
#include "systemd/log.h"

/* A directory on the way to the socket: root's, and only root may change
 * what is in it.  An ancestor with the sticky bit (/tmp) lets others add
 * entries but not rename or remove root's, so it is fine on the way; the
 * socket's own directory must not be writable by anyone else at all. */
static int check_dir(int fd, const char *path, const char *dir, bool socket_dir, char **ret_error) {
        struct stat st;
        bool writable;

        if (fstat(fd, &st) < 0)
                return error_message(ret_error, -errno, "[api] socket %s: cannot inspect directory %s: %s",
                                     path, dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return error_message(ret_error, -ENOTDIR, "[api] socket %s: %s is not a directory", path,
                                     dir);
        if (st.st_uid != 0)
                return error_message(
                        ret_error, -EPERM,
                        "[api] socket %s: directory %s is owned by uid %u (mode %04o), not root: its owner "
                        "could put their own socket in kvolumed's place and tell the pod runner that "
                        "volumes are mounted; make it root's (chown root:root %s) or choose another "
                        "[api] socket",
                        path, dir, (unsigned) st.st_uid, (unsigned) (st.st_mode & 07777), dir);
        writable = (st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_gid != 0);
        if (writable && (socket_dir || !(st.st_mode & S_ISVTX)))
                return error_message(
                        ret_error, -EPERM,
                        "[api] socket %s: directory %s is writable by %s (mode %04o, group %u): they could "
                        "put their own socket in kvolumed's place and tell the pod runner that volumes "
                        "are mounted; chmod go-w %s, or choose another [api] socket",
                        path, dir, (st.st_mode & S_IWOTH) ? "everyone" : "its group",
                        (unsigned) (st.st_mode & 07777), (unsigned) st.st_gid, dir);
        return 0;
}

int api_socket_open_dir(const char *path, bool create, char **ret_error) {
        struct sockaddr_un sa;
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -1;
        char walked[sizeof sa.sun_path] = "/", *name, *comp, *save = NULL;
        int r;

        if (!path || path[0] != '/' || strlen(path) >= sizeof sa.sun_path)
                return error_message(ret_error, -EINVAL,
                                     "[api] socket \"%s\": an absolute path of at most %zu bytes",
                                     strempty(path), sizeof sa.sun_path - 1);
        dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        name = strrchr(dir, '/');
        *name++ = '\0';
        if (isempty(name) || streq(name, ".") || streq(name, ".."))
                return error_message(ret_error, -EINVAL, "[api] socket \"%s\" names no file", path);

        fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return error_message(ret_error, -errno, "cannot open /: %s", strerror(errno));
        r = check_dir(fd, path, "/", isempty(dir), ret_error);
        if (r < 0)
                return r;
        for (comp = strtok_r(dir, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
                _cleanup_close_ int next = -1;
                bool last = !save || isempty(save) || strspn(save, "/") == strlen(save);

                if (streq(comp, ".") || streq(comp, ".."))
                        return error_message(ret_error, -EINVAL,
                                             "[api] socket \"%s\": no . or .. components, please", path);
                if (walked[1] != '\0')
                        strcat(walked, "/");
                strcat(walked, comp);
                /* O_NOFOLLOW: a symlink anyone could have made or change
                 * would send the socket somewhere else. */
                next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0 && errno == ENOENT && create) {
                        /* The parent is checked: no one else can race this
                         * mkdir, and what is there next is what it made. */
                        if (mkdirat(fd, comp, 0755) >= 0) {
                                (void) fchmodat(fd, comp, 0755, 0); /* whatever the umask */
                                log_info("Created %s (root, 0755) for the local API socket %s", walked,
                                         path);
                        } else if (errno != EEXIST)
                                return error_message(ret_error, -errno,
                                                     "[api] socket %s: cannot create directory %s: %s", path,
                                                     walked, strerror(errno));
                        next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                }
                if (next < 0) {
                        struct stat st;
                        int e = errno;

                        if (e == ENOENT)
                                return error_message(ret_error, -ENOENT,
                                                     "[api] socket %s: directory %s does not exist", path,
                                                     walked);
                        if (fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISLNK(st.st_mode))
                                return error_message(
                                        ret_error, -EPERM,
                                        "[api] socket %s: %s is a symlink; kvolumed follows none on "
                                        "the way to its socket (whoever can change it decides where "
                                        "the pod runner connects): name the real directory in [api] "
                                        "socket",
                                        path, walked);
                        if (e == ENOTDIR)
                                return error_message(ret_error, -ENOTDIR,
                                                     "[api] socket %s: %s is not a directory", path, walked);
                        return error_message(ret_error, -e, "[api] socket %s: cannot open directory %s: %s",
                                             path, walked, strerror(e));
                }
                r = check_dir(next, path, walked, last, ret_error);
                if (r < 0)
                        return r;
                (void) close(fd);
                fd = TAKE_FD(next);
        }
        return TAKE_FD(fd);
}

void socket_describe_peer(int fd, char *buf, size_t size) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        char comm_path[64], comm[64] = "";
        FILE *f;

        snprintf(buf, size, "a running process");
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid <= 0)
                return;
        snprintf(comm_path, sizeof comm_path, "/proc/%d/comm", (int) cred.pid);
        f = fopen(comm_path, "re");
        if (f) {
                if (!fgets(comm, sizeof comm, f))
                        comm[0] = '\0';
                fclose(f);
                comm[strcspn(comm, "\n")] = '\0';
        }
        snprintf(buf, size, "pid %d%s%s", (int) cred.pid, comm[0] ? ", " : "", comm);
}

/* Something at the path: a live socket is another process's API (its own
 * root-dir lock does not cover this path), never taken over; only a socket
 * nothing listens on any more (ECONNREFUSED) is removed. */
static int remove_stale(int dir_fd, const char *name, const char *path, const struct sockaddr_un *sa) {
        _cleanup_close_ int probe = -1;
        struct stat st;
        char holder[128];

        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                        return 0;
                return log_error_errno(errno, "Failed to inspect %s: %m", path);
        }
        if (!S_ISSOCK(st.st_mode))
                /* A file someone else put there (a mistyped path): never removed. */
                return log_error_errno(EEXIST,
                                       "[api] socket %s exists and is not a socket; not replacing it", path);
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (probe < 0)
                return log_error_errno(errno, "Failed to create a socket to probe %s: %m", path);
        if (connect(probe, (const struct sockaddr *) sa, sizeof *sa) >= 0 || errno == EAGAIN) {
                /* EAGAIN: its backlog is full, which only a live listener has. */
                socket_describe_peer(probe, holder, sizeof holder);
                return log_error_errno(EADDRINUSE,
                                       "[api] socket %s is in use: %s answers on it (another kvolumed, with "
                                       "another root-dir?). kvolumed never takes a live socket over; stop "
                                       "that process or give this kvolumed another [api] socket",
                                       path, holder);
        }
        if (errno != ECONNREFUSED)
                return log_error_errno(errno,
                                       "Cannot tell whether the socket %s is in use (connect: %m); not "
                                       "replacing it",
                                       path);
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
                return log_error_errno(errno, "Failed to remove the stale local API socket %s: %m", path);
        log_info("Removed the stale local API socket %s: nothing listens on it (its process is gone)", path);
        return 0;
}

int api_socket_bind(const char *path, gid_t gid, ApiSocketFile *ret) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX }, tmp = { .sun_family = AF_UNIX };
        const mode_t mode = gid != (gid_t) -1 ? 0660 : 0600;
        _cleanup_free_ char *error = NULL, *name = NULL, *path_copy = NULL;
        _cleanup_close_ int dir_fd = -1, fd = -1;
        char tmp_name[32];
        size_t dir_len;
        struct stat st;
        mode_t old_umask;
        int r;

        dir_fd = api_socket_open_dir(path, true, &error);
        if (dir_fd < 0)
                return log_error_errno(dir_fd, "%s", error ?: "Cannot use the [api] socket's directory: %m");
        strcpy(sa.sun_path, path); /* its length is checked */
        name = strdup(strrchr(path, '/') + 1);
        path_copy = strdup(path);
        if (!name || !path_copy)
                return -ENOMEM;
        /* Bound under a name of its own first, listening, then renamed
         * into place: a client (or a second kvolumed probing for a live
         * socket) never meets the file before it answers; between bind()
         * and listen() it would get ECONNREFUSED and take it for stale. */
        snprintf(tmp_name, sizeof tmp_name, ".kvolumed-%d.new", (int) getpid());
        dir_len = strrchr(path, '/') - path;
        if (dir_len + 1 + strlen(tmp_name) >= sizeof tmp.sun_path)
                return log_error_errno(ENAMETOOLONG,
                                       "[api] socket %s: its directory's path is too long for a unix socket",
                                       path);
        snprintf(tmp.sun_path, sizeof tmp.sun_path, "%.*s/%s", (int) dir_len, path, tmp_name);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create the local API socket: %m");
        r = remove_stale(dir_fd, name, path, &sa);
        if (r < 0)
                return r;
        /* Ours from an earlier run of this PID (a container's PID 1). */
        (void) unlinkat(dir_fd, tmp_name, 0);
        /* A socket file's owner and mode cannot be set by descriptor
         * (fchmod on the socket changes the socket, not the file).  The
         * umask makes bind() create it with at most the final mode, so no
         * one but root (and the group, once given) ever reaches it; the
         * directory was checked to be root's alone from "/" down, so the
         * name still is this file when the group and mode are set by name
         * (by the descriptor of that directory, following no symlink). */
        old_umask = umask(0777 & ~mode);
        r = bind(fd, (struct sockaddr *) &tmp, sizeof tmp) < 0 ? -errno : 0;
        (void) umask(old_umask);
        if (r < 0)
                return log_error_errno(r, "Failed to bind the local API socket %s: %m", tmp.sun_path);
        if (gid != (gid_t) -1 && fchownat(dir_fd, tmp_name, 0, gid, AT_SYMLINK_NOFOLLOW) < 0)
                r = log_error_errno(errno, "Failed to give the local API socket %s to group %u: %m", path,
                                    (unsigned) gid);
        else if (fchmodat(dir_fd, tmp_name, mode, 0) < 0 ||
                 fstatat(dir_fd, tmp_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                r = log_error_errno(errno, "Failed to set the mode of the local API socket %s: %m", path);
        else if (listen(fd, SOMAXCONN) < 0)
                r = log_error_errno(errno, "Failed to listen on %s: %m", path);
        /* NOREPLACE: a socket that appeared since the probe above is
         * another process's, live; it is not ours to replace. */
        else if (renameat2(dir_fd, tmp_name, dir_fd, name, RENAME_NOREPLACE) < 0)
                r = log_error_errno(errno == EEXIST ? EADDRINUSE : errno,
                                    "[api] socket %s: %s; kvolumed never takes a socket over: stop the "
                                    "process that made it or give this kvolumed another [api] socket",
                                    path,
                                    errno == EEXIST ? "another process made it meanwhile" : strerror(errno));
        if (r < 0) {
                (void) unlinkat(dir_fd, tmp_name, 0);
                return r;
        }
        *ret = (ApiSocketFile){ .dir_fd = TAKE_FD(dir_fd),
                                .name = TAKE_PTR(name),
                                .path = TAKE_PTR(path_copy),
                                .dev = st.st_dev,
                                .ino = st.st_ino };
        return TAKE_FD(fd);
}

void api_socket_file_done(ApiSocketFile *f) {
        struct stat st;

        if (!f || !f->name)
                return;
        /* Another process's socket there now (it replaced ours after
         * all): its API, not ours to remove. */
        if (fstatat(f->dir_fd, f->name, &st, AT_SYMLINK_NOFOLLOW) >= 0) {
                if (st.st_dev != f->dev || st.st_ino != f->ino)
                        log_notice("Not removing %s: it is no longer the socket this kvolumed bound",
                                   f->path);
                else if (unlinkat(f->dir_fd, f->name, 0) < 0)
                        log_warning_errno(errno, "Failed to remove the local API socket %s: %m", f->path);
        }
        if (f->dir_fd >= 0)
                (void) close(f->dir_fd);
        f->dir_fd = -1;
        f->name = mfree_str(f->name);
        f->path = mfree_str(f->path);
}
