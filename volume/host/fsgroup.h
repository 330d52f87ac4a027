/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Applies a pod's fsGroup to a published volume as kubelet's
 * SetVolumeOwnership does: every file and directory gets the group, group
 * read-write (read-only for a read-only volume), and directories also
 * group-execute and setgid, at any depth (kubelet's filepath.Walk has no
 * limit either), with a bounded number of descriptors, never up through "..",
 * and leaving out whatever is mounted inside.  It can take long on a big
 * volume, so it runs in a child process and reports through an sd-event child
 * source (SIGCHLD must be blocked). */

#include <sys/types.h>
#include <systemd/sd-event.h>

#include "systemd/macro.h"

/* A walk makes no progress (no directory read, no entry changed) for this
 * long: its file system does not answer (a hung FUSE daemon, a hard NFS
 * mount of a dead server), and the walk is given up.  A stall, not a total:
 * a big volume takes what it takes, as in kubelet.  The CSI call-timeout's
 * default; KVOLUMED_TEST_FSGROUP_STALL_MS in the environment lowers it for
 * the tests (only in a build with -Dtest-hooks=true). */
#define FSGROUP_STALL_USEC (2 * USEC_PER_MINUTE)

typedef struct FsGroupWalk FsGroupWalk;

/* result: 0 done; -ETIMEDOUT: no progress for the stall deadline, the child
 * was killed; another -errno: the walk failed. */
typedef void (*fsgroup_done_t)(FsGroupWalk *w, int result, void *userdata);

/* on_root_mismatch: fsGroupChangePolicy OnRootMismatch — skip the walk when
 * the volume's root already has the group and permissions.  "done" is called
 * once, from the loop, never from inside; the caller frees the walk. */
int fsgroup_walk_start(sd_event *event, const char *path, gid_t gid, bool on_root_mismatch,
                       fsgroup_done_t done, void *userdata, FsGroupWalk **ret);
/* Frees it; a child still running is killed and reaped when it exits (one
 * stuck in a dead file system may take its time: nobody waits for it). */
FsGroupWalk *fsgroup_walk_free(FsGroupWalk *w);
pid_t fsgroup_walk_pid(const FsGroupWalk *w);
/* The stall deadline in force (FSGROUP_STALL_USEC or the tests' value). */
uint64_t fsgroup_stall_usec(void);

/* The walk itself, synchronous (the child runs it; tests call it directly). */
int fsgroup_apply(const char *path, gid_t gid, bool on_root_mismatch);
