/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A hostPath volume's `type` (kubelet pkg/volume/hostpath, checkType):
 * checked, and for the *OrCreate types made, before the pod's containers
 * start.  The path is the host's, as the spec gives it; like kubelet, the
 * checks follow symlinks (os.Stat).
 *
 * host_path_check() may block (a stat or mkdir on whatever file system the
 * host path is on, NFS included): call it off the event loop. */

#include <stdbool.h>

typedef enum HostPathType {
        HOST_PATH_UNSET,               /* "": no check at all */
        HOST_PATH_DIRECTORY_OR_CREATE, /* "DirectoryOrCreate" */
        HOST_PATH_DIRECTORY,           /* "Directory" */
        HOST_PATH_FILE_OR_CREATE,      /* "FileOrCreate" */
        HOST_PATH_FILE,                /* "File" */
        HOST_PATH_SOCKET,              /* "Socket" */
        HOST_PATH_CHAR_DEVICE,         /* "CharDevice" */
        HOST_PATH_BLOCK_DEVICE,        /* "BlockDevice" */
        _HOST_PATH_TYPE_MAX,
        _HOST_PATH_TYPE_INVALID = -22, /* -EINVAL */
} HostPathType;

/* The API's spelling → the type; NULL and "" are HOST_PATH_UNSET; anything
 * else unknown is _HOST_PATH_TYPE_INVALID. */
HostPathType host_path_type_from_string(const char *s);
/* The API's spelling ("" for HOST_PATH_UNSET); NULL when out of range. */
const char *host_path_type_to_string(HostPathType t);

/* kubelet's checkTypeInternal for an absolute path:
 *   DirectoryOrCreate: when nothing is there, mkdir -p with 0755 (less the
 *     umask, as kubelet's os.MkdirAll; owned by kvolumed, so root);
 *   FileOrCreate: when nothing is there, an empty file 0644 (less the umask);
 *     the parent directory is NOT created (kubelet's makeFile does not), so a
 *     missing parent fails with -ENOENT;
 *   the others: the path must exist and be of that type.
 * One difference: kubelet returns success as soon as it created something
 * (or found a dangling symlink in the way); here the type is checked after
 * the creation too, so a dangling symlink fails the check.
 * Returns 0 when the path is (now) of the type, 1 when it was created,
 * -ENOTDIR/-EEXIST/-ENOENT... on failure, -EINVAL for a relative path or an
 * invalid type.  *ret_error (optional, freed by the caller) gets kubelet's
 * message: "hostPath type check failed: /x is not a directory", "... is not
 * a file", "... is not a socket file", "... is not a character device",
 * "... is not a block device", "Foo is an invalid volume type". */
int host_path_check(const char *path, HostPathType type, char **ret_error);

/* The same from the spec's string: an unknown type fails with -EINVAL and
 * kubelet's "<type> is an invalid volume type". */
int host_path_check_spec(const char *path, const char *type, char **ret_error);
