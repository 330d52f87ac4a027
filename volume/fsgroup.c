/* SPDX-License-Identifier: Apache-2.0 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "systemd/log.h"
#include "volume/fsgroup.h"

#define RW_MASK 0660
#define EXEC_MASK 0110

/* nftw has no user data: the child is single-threaded, so a static is safe here. */
static gid_t walk_gid;

static int fix_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        mode_t mask = RW_MASK;

        if (lchown(path, (uid_t) -1, walk_gid) < 0)
                return -errno;
        if (S_ISLNK(st->st_mode))
                return 0;
        if (S_ISDIR(st->st_mode))
                mask |= EXEC_MASK | S_ISGID;
        if ((st->st_mode & mask) != mask && chmod(path, (st->st_mode & 07777) | mask) < 0)
                return -errno;
        return 0;
}

int fsgroup_apply(const char *path, gid_t gid, bool on_root_mismatch) {
        struct stat st;

        if (lstat(path, &st) < 0)
                return -errno;
        if (on_root_mismatch && st.st_gid == gid && (st.st_mode & (RW_MASK | EXEC_MASK | S_ISGID)) ==
                                                            (RW_MASK | EXEC_MASK | S_ISGID))
                return 0;
        walk_gid = gid;
        /* FTW_PHYS: never follow symlinks; FTW_MOUNT: stay on the volume. */
        return nftw(path, fix_one, 64, FTW_PHYS | FTW_MOUNT);
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
