/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* One kvolumed per root-dir: the path, whatever is later mounted over it or
 * made in its place.  Two locks, both taken at start and held for the
 * process's life:
 *  - an flock() of root-dir's directory itself: a second path to that
 *    directory (a bind mount, another symlink) finds it;
 *  - an flock() of a file outside root-dir named after its resolved path
 *    (ROOT_LOCK_DIR/<path escaped>.lock): a file system mounted over
 *    root-dir after start, or a directory made where it was renamed from,
 *    is another inode with no lock on it, but the same path.
 * root-dir is resolved once at start (symlinks in its path followed): the
 * mount table names mounts by the kernel's
 * path, and every path kvolumed compares with it or gives a driver is
 * spelt that way.  root_lock_check() says whether that still holds. */

#include <stdbool.h>

#include "systemd/macro.h"

/* Root-only (0700): whoever can open a file there can hold its lock. */
#define ROOT_LOCK_DIR "/run/kvolumed/locks"

typedef struct RootLock RootLock;

/* Creates path (0750) when missing (not its parents: -ENOENT), resolves it,
 * and takes both locks; lock_dir (ROOT_LOCK_DIR, or a test's) is created
 * 0700 when missing.  -EBUSY, logged with the holder's PID, when another
 * process holds either; other errors are logged too. */
int root_lock_take(const char *path, const char *lock_dir, RootLock **ret);
RootLock *root_lock_free(RootLock *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(RootLock *, root_lock_free);

/* root-dir as the kernel names it (resolved at start): the path to use. */
const char *root_lock_path(const RootLock *l);
/* root-dir as configured. */
const char *root_lock_configured(const RootLock *l);
/* The locked directory, O_DIRECTORY|O_RDONLY|O_CLOEXEC; owned by the lock. */
int root_lock_fd(const RootLock *l);

/* Whether root-dir is still what was locked: the configured path resolves
 * to the same path, that path names the locked directory, and the lock file
 * is still ours (taken again if someone removed it).  0 if so; else -errno
 * with what changed, for the operator, in *ret_why (free it).  Cheap (a
 * resolution of the path and two statx() of cached attributes): it runs at
 * every reconcile pass, every mount change and every few seconds. */
int root_lock_check(RootLock *l, char **ret_why);

/* The lock file's name for a resolved path: "var-lib-kubelet.lock" for
 * /var/lib/kubelet (systemd-escape --path), or "sha256-<hex>.lock" when
 * that would be too long for a file name.  For tests. */
int root_lock_file_name(const char *resolved, char **ret);
