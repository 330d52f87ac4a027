/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Applies a pod's fsGroup to a published volume as kubelet's
 * SetVolumeOwnership does: every file and directory gets the group, group
 * read-write (read-only for a read-only volume), and directories also
 * group-execute and setgid.  It can take long on a big volume, so it runs in
 * a child process and reports through an sd-event child source (SIGCHLD must
 * be blocked). */

#include <sys/types.h>
#include <systemd/sd-event.h>

#include "systemd/macro.h"

/* on_root_mismatch: fsGroupChangePolicy OnRootMismatch — skip the walk when
 * the volume's root already has the group and permissions. */
int fsgroup_apply_start(sd_event *event, const char *path, gid_t gid, bool on_root_mismatch,
                        sd_event_child_handler_t done, void *userdata, pid_t *ret_pid, sd_event_source **ret_source);

/* The walk itself, synchronous (the child runs it; tests call it directly). */
int fsgroup_apply(const char *path, gid_t gid, bool on_root_mismatch);
