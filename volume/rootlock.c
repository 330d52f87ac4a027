/* SPDX-License-Identifier: Apache-2.0 */
/* One kvolumed per root-dir: two would both publish and unpublish every
 * volume (two NodePublishVolume for one pod at the same millisecond).  The
 * lock is an flock() of root-dir itself, not of a file in it: nothing of
 * ours stays in kubelet's tree, and a second path to the same directory (a
 * bind mount, a symlink) finds the same lock.  The kernel drops it when the
 * process goes, however it goes. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "systemd/log.h"
#include "volume/rootdir.h"

/* The PID holding an flock() on the inode, from /proc/locks ("1: FLOCK
 * ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF", major and minor in
 * hex); 0 when not found.  A file system whose stat() device differs from
 * its superblock's (btrfs subvolumes) is matched on the inode alone. */
static pid_t flock_holder(const struct stat *st) {
        _cleanup_(fclosep) FILE *f = fopen("/proc/locks", "re");
        char line[256];
        pid_t by_inode = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof line, f)) {
                unsigned maj, min;
                unsigned long long ino;
                int pid;
                char type[16];

                if (strstr(line, "->")) /* a waiter, not the holder */
                        continue;
                if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", type, &pid, &maj, &min, &ino) != 5 ||
                    !streq(type, "FLOCK") || ino != (unsigned long long) st->st_ino || pid <= 0)
                        continue;
                if (maj == major(st->st_dev) && min == minor(st->st_dev))
                        return pid;
                by_inode = by_inode ?: pid;
        }
        return by_inode;
}

int root_dir_lock(const char *path, int *ret_fd) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        if (isempty(path) || path[0] != '/')
                return -EINVAL;
        if (mkdir(path, 0750) < 0 && errno != EEXIST)
                return log_error_errno(errno, "Failed to create root-dir %s: %m", path);
        /* O_CLOEXEC: nothing exec'ed keeps it; the fsGroup walk's forked
         * child closes it itself (volume/fsgroup.c). */
        fd = open(path, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(errno, "Failed to open root-dir %s: %m", path);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                pid_t holder;

                if (errno != EWOULDBLOCK)
                        return log_error_errno(errno, "Failed to lock root-dir %s: %m", path);
                holder = fstat(fd, &st) >= 0 ? flock_holder(&st) : 0;
                if (holder > 0)
                        log_error("root-dir %s is in use by another kvolumed (PID %d): one kvolumed per "
                                  "root-dir; "
                                  "not starting",
                                  path, (int) holder);
                else
                        log_error("root-dir %s is locked by another process: one kvolumed per root-dir; "
                                  "not starting",
                                  path);
                return -EBUSY;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}
