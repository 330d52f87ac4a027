/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "systemd/errormsg.h"
#include "systemd/log.h"
#include "volume/host/hostpathtype.h"

static const struct {
        const char *name;
        mode_t format;    /* S_IF* the path must have */
        const char *what; /* kubelet's "is not a ..." */
} types[_HOST_PATH_TYPE_MAX] = {
        [HOST_PATH_UNSET] = { "", 0, NULL },
        [HOST_PATH_DIRECTORY_OR_CREATE] = { "DirectoryOrCreate", S_IFDIR, "a directory" },
        [HOST_PATH_DIRECTORY] = { "Directory", S_IFDIR, "a directory" },
        [HOST_PATH_FILE_OR_CREATE] = { "FileOrCreate", S_IFREG, "a file" },
        [HOST_PATH_FILE] = { "File", S_IFREG, "a file" },
        [HOST_PATH_SOCKET] = { "Socket", S_IFSOCK, "a socket file" },
        [HOST_PATH_CHAR_DEVICE] = { "CharDevice", S_IFCHR, "a character device" },
        [HOST_PATH_BLOCK_DEVICE] = { "BlockDevice", S_IFBLK, "a block device" },
};

HostPathType host_path_type_from_string(const char *s) {
        if (!s)
                return HOST_PATH_UNSET;
        for (int t = 0; t < _HOST_PATH_TYPE_MAX; t++)
                if (streq(types[t].name, s))
                        return t;
        return _HOST_PATH_TYPE_INVALID;
}

const char *host_path_type_to_string(HostPathType t) {
        return t >= 0 && t < _HOST_PATH_TYPE_MAX ? types[t].name : NULL;
}

/* os.MkdirAll(path, 0755): each missing parent made, an existing one kept. */
static int mkdir_parents(const char *path, mode_t mode) {
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        for (char *p = copy + 1;; p++) {
                char *slash = strchr(p, '/');
                if (slash)
                        *slash = '\0';
                if (*copy && mkdir(copy, mode) < 0 && errno != EEXIST)
                        return -errno;
                if (!slash)
                        return 0;
                *slash = '/';
                p = slash;
        }
}

int host_path_check(const char *path, HostPathType type, char **ret_error) {
        struct stat st;
        bool created = false;
        int r;

        if (type < 0 || type >= _HOST_PATH_TYPE_MAX)
                return error_message(ret_error, -EINVAL, "%s is an invalid volume type", "(unknown)");
        if (isempty(path) || path[0] != '/')
                return error_message(ret_error, -EINVAL, "hostPath %s is not an absolute path",
                                     strempty(path));
        if (type == HOST_PATH_UNSET)
                return 0;

        if (stat(path, &st) < 0) {
                if (errno != ENOENT)
                        return error_message(ret_error, -errno, "hostPath type check failed: %s is not %s",
                                             path, types[type].what);
                if (type == HOST_PATH_DIRECTORY_OR_CREATE) {
                        r = mkdir_parents(path, 0755);
                        if (r < 0)
                                return error_message(ret_error, r, "mkdir %s: %s", path, strerror(-r));
                        log_info("Created hostPath directory %s (DirectoryOrCreate)", path);
                        created = true;
                } else if (type == HOST_PATH_FILE_OR_CREATE) {
                        int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOCTTY, 0644);
                        if (fd < 0)
                                return error_message(ret_error, -errno, "open %s: %s", path,
                                                     strerror(errno));
                        close(fd);
                        log_info("Created hostPath file %s (FileOrCreate)", path);
                        created = true;
                }
                if (stat(path, &st) < 0)
                        return error_message(ret_error, errno == ENOENT ? -ENOENT : -errno,
                                             "hostPath type check failed: %s is not %s", path,
                                             types[type].what);
        }
        if ((st.st_mode & S_IFMT) != types[type].format)
                return error_message(ret_error, S_ISDIR(types[type].format) ? -ENOTDIR : -EEXIST,
                                     "hostPath type check failed: %s is not %s", path, types[type].what);
        return created ? 1 : 0;
}

int host_path_check_spec(const char *path, const char *type, char **ret_error) {
        HostPathType t = host_path_type_from_string(type);
        if (t < 0)
                return error_message(ret_error, -EINVAL, "%s is an invalid volume type", type);
        return host_path_check(path, t, ret_error);
}
