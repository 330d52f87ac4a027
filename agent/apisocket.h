/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The file of the local volumes API's unix socket ([api] socket).  Whoever
 * can write its directory can put their own socket in its place and tell
 * the pod runner that a pod's volumes are mounted, so:
 *  - the path is walked by descriptor from "/": every component must be a
 *    real directory (no symlink) owned by root and not writable by group
 *    or others (group root may write; an ancestor with the sticky bit, like
 *    /tmp, is fine, since no one else can rename what root made in it);
 *    the socket's own directory must be writable by root only;
 *  - a socket found there is connected to first: one that answers belongs
 *    to a running process (another kvolumed with another root-dir) and is
 *    never taken over; only one that refuses (ECONNREFUSED: its process is
 *    gone) is removed as stale;
 *  - at the end the file is removed only if it is still the one bound
 *    (same device and inode). */

#include <stdbool.h>
#include <sys/types.h>

#include "systemd/macro.h"

typedef struct ApiSocketFile {
        int dir_fd; /* O_PATH, the directory checked */
        char *name; /* the socket's name in it */
        char *path;
        dev_t dev;
        ino_t ino;
} ApiSocketFile;

/* Checks the directories of the socket path `path` as above; with create,
 * makes the missing ones (root, 0755: an [api] group must reach the socket).
 * Returns an O_PATH descriptor of the socket's directory, or -errno with
 * *ret_error (may be NULL) saying what is wrong and what to do: -EPERM a
 * directory others could write or a symlink, -ENOENT missing (without
 * create), -EINVAL not an absolute normalized path. */
int api_socket_open_dir(const char *path, bool create, char **ret_error);

/* Binds and listens on `path` (its directory made and checked as above),
 * mode 0600 root:root, or 0660 root:gid when gid is not (gid_t) -1, before
 * any client can connect.  Returns the listening descriptor and fills
 * *ret; errors are logged with the path. */
int api_socket_bind(const char *path, gid_t gid, ApiSocketFile *ret);

/* Removes the socket file if it is still the one bound, and frees *f. */
void api_socket_file_done(ApiSocketFile *f);

/* "pid 1234, kvolumed" of the process listening on a connected unix socket
 * (SO_PEERCRED and its /proc/PID/comm), "a running process" when unknown. */
void socket_describe_peer(int fd, char *buf, size_t size);
