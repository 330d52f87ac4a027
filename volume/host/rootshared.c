/* SPDX-License-Identifier: Apache-2.0 */
#include <libmount.h>
#include <limits.h>
#include <sys/mount.h>

#include "systemd/log.h"
#include "volume/host/rootshared.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct libmnt_table *, mnt_unref_table);

/* The mount that holds path (its own when it is a mount point): whether it
 * is shared, and whether path is its mount point. */
static int mount_of(const char *path, bool *ret_shared, bool *ret_is_mount_point) {
        _cleanup_(mnt_unref_tablep) struct libmnt_table *t = NULL;
        struct libmnt_fs *fs;
        unsigned long flags = 0;

        t = mnt_new_table_from_file("/proc/self/mountinfo");
        if (!t)
                return -errno ?: -EIO;
        fs = mnt_table_find_mountpoint(t, path, MNT_ITER_BACKWARD);
        if (!fs)
                return -ENOENT;
        if (mnt_fs_get_propagation(fs, &flags) < 0)
                return -EIO;
        *ret_shared = flags & MS_SHARED;
        *ret_is_mount_point = streq_ptr(mnt_fs_get_target(fs), path);
        return 0;
}

int rootdir_make_shared(const char *root_dir) {
        char path[PATH_MAX];
        bool shared = false, is_mount_point = false;
        int r;

        if (isempty(root_dir) || root_dir[0] != '/')
                return -EINVAL;
        if (!realpath(root_dir, path))
                return log_error_errno(errno, "Cannot resolve root-dir %s: %m", root_dir);
        r = mount_of(path, &shared, &is_mount_point);
        if (r < 0)
                return log_error_errno(r, "Cannot find the mount of root-dir %s in /proc/self/mountinfo: %m",
                                       path);
        if (shared) {
                log_debug("root-dir %s is on a shared mount already", path);
                return 0;
        }
        if (!is_mount_point) {
                /* Recursive: volumes mounted below by a kvolumed that did not
                 * make it shared (an upgrade) stay where the runtime sees them. */
                if (mount(path, path, "none", MS_BIND | MS_REC, NULL) < 0)
                        return log_error_errno(errno, "Cannot bind-mount root-dir %s onto itself: %m", path);
                log_info("Bind-mounted root-dir %s onto itself, to make it a shared mount", path);
        }
        if (mount("none", path, "none", MS_REC | MS_SHARED, NULL) < 0)
                return log_error_errno(
                        errno,
                        "Cannot make root-dir %s a shared mount: %m; mounts of node plugins with "
                        "Bidirectional propagation will not reach the host",
                        path);
        log_info("Made root-dir %s a shared mount (rshared), as kubelet does", path);
        return 1;
}
