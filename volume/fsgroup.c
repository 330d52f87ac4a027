/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/fsgroup.h"

#define RW_MASK 0660
#define EXEC_MASK 0110
/* Deeper trees are refused rather than walked with unbounded descriptors. */
#define MAX_DEPTH 256

/* The volume belongs to a pod: its files can be swapped for symlinks while
 * we walk.  So nothing is ever changed by name after a check: each entry is
 * opened once (O_PATH|O_NOFOLLOW, relative to its directory's descriptor),
 * examined with fstat, and changed through that descriptor; a symlink only
 * ever has its own group changed, and a directory is walked through a
 * descriptor reopened from the one examined (kubelet's CVE-2017-1002101 is
 * the same race through a path name). */
static int fix_opened(int fd, const struct stat *st, gid_t gid) {
        char proc[64];
        mode_t mask = RW_MASK;

        if (fchownat(fd, "", (uid_t) -1, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISLNK(st->st_mode))
                return 0;
        if (S_ISDIR(st->st_mode))
                mask |= EXEC_MASK | S_ISGID;
        if ((st->st_mode & mask) == mask)
                return 0;
        /* fchmod() refuses O_PATH descriptors; the magic link names exactly
         * the inode opened, whatever its name points to now. */
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        return chmod(proc, (st->st_mode & 07777) | mask) < 0 ? -errno : 0;
}

static int walk(int dir_fd, dev_t dev, gid_t gid, unsigned depth) {
        int list_fd, r = 0;
        struct dirent *de;
        DIR *d;

        if (depth > MAX_DEPTH)
                return -ELOOP;
        list_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (list_fd < 0)
                return -errno;
        d = fdopendir(list_fd);
        if (!d) {
                close(list_fd);
                return -errno;
        }
        while (r >= 0 && (de = readdir(d))) {
                _cleanup_close_ int fd = -1;
                struct stat st;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                fd = openat(dir_fd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        if (errno == ENOENT)
                                continue; /* removed meanwhile */
                        r = -errno;
                        break;
                }
                if (fstat(fd, &st) < 0) {
                        r = -errno;
                        break;
                }
                if (st.st_dev != dev)
                        continue; /* another file system mounted inside: not the volume */
                r = fix_opened(fd, &st, gid);
                if (r >= 0 && S_ISDIR(st.st_mode))
                        r = walk(fd, dev, gid, depth + 1);
        }
        closedir(d);
        return r;
}

int fsgroup_apply(const char *path, gid_t gid, bool on_root_mismatch) {
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r;

        fd = open(path, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (on_root_mismatch && st.st_gid == gid && (st.st_mode & (RW_MASK | EXEC_MASK | S_ISGID)) ==
                                                            (RW_MASK | EXEC_MASK | S_ISGID))
                return 0;
        r = fix_opened(fd, &st, gid);
        if (r < 0)
                return r;
        return walk(fd, st.st_dev, gid, 0);
}

int fsgroup_apply_start(sd_event *event, const char *path, gid_t gid, bool on_root_mismatch,
                        sd_event_child_handler_t done, void *userdata, pid_t *ret_pid, sd_event_source **ret_source) {
        pid_t pid;
        int r;

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* The child touches nothing of the parent's loop or connections. */
                (void) signal(SIGTERM, SIG_DFL);
                _exit(fsgroup_apply(path, gid, on_root_mismatch) == 0 ? 0 : 1);
        }
        r = sd_event_add_child(event, ret_source, pid, WEXITED, done, userdata);
        if (r < 0) {
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                return r;
        }
        *ret_pid = pid;
        return 0;
}
