/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A pod's subPath and subPathExpr volumeMounts (kubelet_pods.go makeMounts,
 * pkg/volume/util/subpath), for every kind of volume: prepared by the
 * operation frame at the end of a publish, before it counts as done (each
 * one bound at pods/<uid>/volume-subpaths/<volume>/<container>/<index> with
 * host/subpath.h, off the loop), and removed before the volume's unpublish
 * runs, so that nothing of them holds the volume when its unpublish (and a
 * CSI unstage after it) comes.  Per pod, not per kind. */

#include <stdbool.h>

typedef struct Operation Operation;
typedef struct VolumeManager VolumeManager;

/* A publish succeeded: when a container of the pod mounts the volume with a
 * subPath, prepares them off the loop and returns true (the frame's
 * operation_finish is called again when they are: a success, or a failure
 * "failed to prepare subPath for volumeMount ..." with the reason in the
 * journal).  false: none to prepare, the frame goes on. */
bool subpaths_publish_end(Operation *op);

/* Before an unpublish's first step: removes the volume's subPath binds off
 * the loop and returns true (operation_run is called again then, or the
 * operation fails when one cannot be removed); false: nothing to do. */
bool subpaths_unpublish_start(Operation *op);

/* For the local API: where the runtime finds the subPath of volumeMount
 * "index" of "container" mounting the pod's volume "volume" (absolute, in
 * *ret, freed by the caller), and whether it is ready: 1 when the volume's
 * publish for the pod is done (which includes its subPaths), 0 when not yet,
 * -ENOENT for a pod or volume the manager does not know, -EINVAL for a name
 * that cannot be a path component. */
int subpaths_host_path(VolumeManager *m, const char *pod_uid, const char *volume, const char *container,
                       unsigned index, char **ret);
