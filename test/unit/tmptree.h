/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A unit test's temporary tree under /tmp, removed when the test is done. */

#include <errno.h>
#include <ftw.h>
#include <stdio.h>

/* nftw()'s: -1 with errno stops the walk, and nftw() returns it. */
static inline int tmptree_remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        (void) st;
        (void) type;
        (void) ftw;
        return remove(path);
}

/* Removes path and everything below it, as rm -rf does (symlinks are not
 * followed); a path that is not there is no error.  0 or -errno: nftw()
 * goes by whole paths, so a tree deeper than PATH_MAX is refused
 * (ENAMETOOLONG) where rm -rf, working from descriptors, is not. */
static inline int tmptree_remove(const char *path) {
        if (nftw(path, tmptree_remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
                return errno == ENOENT ? 0 : -errno;
        return 0;
}
