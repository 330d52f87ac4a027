/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* root-dir made a shared mount, as kubelet does at start (setupDataDirs →
 * hostutil MakeRShared): node plugins that publish with
 * mountPropagation: Bidirectional need the mounts made under root-dir to
 * propagate to the host and back. */

/* When the mount that holds root_dir (root_dir itself if it is a mount
 * point, else the one below it, as kubelet's isShared looks it up in
 * /proc/self/mountinfo) is already shared: nothing is done, 0.  Otherwise
 * root_dir is bind-mounted onto itself, recursively (volumes already
 * mounted below stay visible), unless it is already a mount point
 * (kubelet binds unconditionally, stacking a bind on every restart; once is
 * enough), then made rshared (MS_REC|MS_SHARED): 1.  Logged when it changes
 * something.  root_dir must be absolute; symlinks in it are resolved first.
 * Call it once at start, after the lock (a second agent must stop there
 * rather than stack a bind over the running one's root-dir) and BEFORE
 * anything else opens root-dir (RootDir): a descriptor opened before the
 * bind names the directory under it, and what is made through it (mounts
 * included) would be hidden under the bind, outside the shared mount; the
 * lock's own descriptor is such a one and is taken again (agent/main.c).  May
 * block (a mount).  -errno on failure (kubelet stops: "error configuring
 * root directory"). */
int rootdir_make_shared(const char *root_dir);
