/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A volumeMount's subPath, prepared as kubelet prepares it since
 * CVE-2017-1002101 and CVE-2021-25741 (pkg/volume/util/subpath,
 * kubelet_pods.go makeMounts): the path is resolved by descriptor inside the
 * volume, created there when missing, and the descriptor itself - never the
 * path again - is bind-mounted at
 *     <pod dir>/volume-subpaths/<volume>/<container>/<index>
 * which is what the runtime gets as the mount's host path.
 *
 * Everything here may block on the volume's file system (a dead NFS server,
 * a FUSE daemon): call it off the event loop. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "systemd/log.h"

/* Every ret_error below is optional, written only on a failure (a malloc'd
 * message the caller frees), never read or freed before. */

/* subPathExpr expanded as kubelet does (ExpandContainerVolumeMounts and
 * third_party/forked/golang/expansion): "$(NAME)" is replaced by NAME's
 * value in env, "$$" by "$", any other "$" is kept as written, an unclosed
 * "$(" too.  env holds n_env "NAME=value" strings (the container's resolved
 * environment, a later entry overriding an earlier one as in kubelet's map).
 * A variable that is missing or empty is an error, as in kubelet:
 * -EINVAL and *ret_error = "missing value for A, B" (sorted, each once).
 * ret_error may be NULL; otherwise the caller frees it. */
int subpath_expand(const char *expr, const char *const *env, size_t n_env, char **ret, char **ret_error);

/* kubelet's checks of an (expanded) subPath, with its messages:
 * "error SubPath `/a` must not be an absolute path",
 * "unable to provision SubPath `a/../b`: must not contain '..'".
 * Also refused: longer than PATH_MAX, a control character.  "" is not a
 * subPath (the caller has none): -EINVAL too.  0 or -EINVAL. */
int subpath_validate(const char *subpath, char **ret_error);

typedef struct SubpathRequest {
        int volume_fd;              /* the volume's root directory (any open mode, O_PATH is fine), opened
                                     * after the volume is mounted: a descriptor opened before shows the
                                     * directory under the mount */
        const char *volume_path;    /* its path, for messages only */
        int pod_dir_fd;             /* <root-dir>/pods/<uid>, opened beneath root-dir */
        const char *pod_dir_path;   /* its path: messages and the returned bind path */
        const char *volume_name;    /* the pod's volume name (a path component) */
        const char *container_name; /* a path component */
        unsigned index;             /* the volumeMount's index in the container's volumeMounts */
        const char *subpath;        /* already expanded (subpath_expand) */
        bool read_only;             /* remount the bind read-only (kubelet leaves this to the runtime) */
        const LogFields *log;       /* journal fields of the pod and volume; may be NULL */
} SubpathRequest;

/* Validates req->subpath (subpath_validate) and the names, resolves the
 * subPath from req->volume_fd with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS): a symlink inside the volume is followed as long as
 * every step stays inside it (kubelet evaluates symlinks and then checks the
 * result is within the volume); a relative symlink climbing out, an absolute
 * symlink (its target means the host's root, not the volume's: kubelet only
 * takes it when it happens to name a path inside the volume) and /proc magic
 * links are refused.  Mounts inside the volume are crossed, as kubelet does.
 * Missing components are created as directories one by one, by descriptor,
 * with the volume root's mode (kubelet's SafeMakeDir: mkdirat then fchmod).
 * Then binds /proc/self/fd/<that descriptor> (MS_BIND, not recursive, as
 * `mount --bind`) onto the target, created to match (a directory 0750 or an
 * empty file 0640, parents 0750, as kubelet).  Idempotent: a bind already
 * there of the same inode (st_dev, st_ino) is kept; one of something else
 * is unmounted and replaced.
 * Returns 0 and *ret_bind_path (absolute, freed by the caller), or -errno:
 * -EINVAL for an invalid subPath or name, -EXDEV when the subPath resolves
 * outside the volume, -ELOOP for a magic link or a symlink loop ("subPath
 * 'l/x' of volume 'data' cannot be resolved (a symlink loop or a magic link
 * at 'l')"), -ENOSYS on a kernel without openat2 (before 5.6: refused
 * rather than resolved less safely).
 * ret_error (optional) receives the operator's message, for example
 * "subPath 'a/b' of volume 'data' resolves outside the volume (through symlink 'a')";
 * kubelet gives the pod only "failed to prepare subPath for volumeMount ..."
 * to hide the host's layout, the full message goes to the journal. */
int subpath_prepare(const SubpathRequest *req, char **ret_bind_path, char **ret_error);

/* Unmounts and removes every bind under <pod dir>/volume-subpaths/<volume>/
 * (each container, each index), then those directories, then
 * volume-subpaths itself if it is empty.  By descriptor, never following a
 * symlink, never recursive: an index entry is unmounted while it is a mount
 * root (binds stacked by a crash included), then removed when it is an
 * empty directory or an empty regular file (the target kubelet creates, or
 * the leftover of a crash between creating and binding).  Anything else (a
 * file with data, a symlink, a socket) is left alone and logged: then
 * -ENOTEMPTY, and the volume must not be torn down yet.  0 when nothing is
 * left (also when there never was anything). */
int subpath_cleanup(int pod_dir_fd, const char *pod_dir_path, const char *volume_name, const LogFields *log);

/* subpath_cleanup() for each volume under <pod dir>/volume-subpaths.  The
 * first error is returned after trying every volume. */
int subpath_cleanup_pod(int pod_dir_fd, const char *pod_dir_path, const LogFields *log);

/* One entry under volume-subpaths/<volume>/<container>/. */
typedef struct SubpathBind {
        char *path; /* absolute: <pod dir>/volume-subpaths/<volume>/<container>/<index> */
        char *container;
        char *index;     /* the entry's name (a number when kvolumed made it) */
        bool mounted;    /* a mount root (the bind is in place) */
        uint64_t mnt_id; /* its mount ID when mounted (statx STATX_MNT_ID) */
        dev_t dev;       /* what the entry shows: the bound inode when mounted */
        ino_t ino;
} SubpathBind;

/* Every entry under volume-subpaths/<volume>/, mounted or not.  These binds
 * are binds of the volume's published directory (or of a path in it), not
 * further mounts of its staged file system: the unstage guard must know
 * them (to recognise them in the mount table) and must not let them hold
 * the volume, since subpath_cleanup() removes them before the unpublish.
 * *ret is NULL and *ret_n 0 when there are none.  Free with
 * subpath_binds_free(). */
int subpath_list(int pod_dir_fd, const char *pod_dir_path, const char *volume_name, SubpathBind **ret,
                 size_t *ret_n);
void subpath_binds_free(SubpathBind *b, size_t n);

#if KVOLUMED_TEST_HOOKS
/* Tests only (a -Dtest-hooks=true build): called with the resolved
 * descriptor between the resolution and the bind, to swap the path under
 * it and show that the bind is of the descriptor. */
extern void (*subpath_test_after_resolve)(int fd, void *userdata);
extern void *subpath_test_after_resolve_userdata;
#endif
