/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Opening a path below a directory without ever leaving it: openat2() with
 * RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (and RESOLVE_NO_SYMLINKS unless
 * follow_symlinks), and where openat2 is missing (Linux before 5.6, valgrind)
 * the same walk by hand, one component at a time from descriptors, so that
 * what kvolumed does under valgrind is what it does on a node. */

#include <dirent.h>
#include <stdbool.h>
#include <sys/types.h>

/* Returns a descriptor (O_CLOEXEC added) or -errno: -EXDEV when the path
 * leaves dirfd's tree (a ".." above it, an absolute symlink, a relative one
 * climbing out), -ELOOP for a symlink when !follow_symlinks (a trailing one
 * with O_PATH|O_NOFOLLOW is opened itself, as openat2 does), a /proc magic
 * link, or more than 40 links.  With follow_symlinks, O_CREAT is refused
 * (-EINVAL): nothing is created at the end of a path a pod controls. */
int open_beneath(int dirfd, const char *path, int flags, mode_t mode, bool follow_symlinks);

/* A listing of dfd's entries through a duplicate of it, so that dfd stays
 * the caller's, for the *at() calls on the entries the listing names.
 * 0 with *ret (closedir() it), or -errno. */
int dir_list_open(int dfd, DIR **ret);

#if KVOLUMED_TEST_HOOKS
/* Tests only: take the walk by hand even where openat2 exists. */
extern bool beneath_test_no_openat2;
#endif
