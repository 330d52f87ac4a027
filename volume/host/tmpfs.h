/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* emptyDir with medium: Memory: the tmpfs's size as kubelet computes it
 * (pkg/volume/emptydir calculateEmptyDirMemorySize, SizeMemoryBackedVolumes
 * being GA), and the mount itself. */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "systemd/log.h"

/* The pod's memory limit as the pod cgroup gets it (kubelet's
 * ResourceConfigForPod over PodRequestsAndLimits): the sum of the app
 * containers' limits, raised to the largest init container's limit, plus
 * the pod's overhead (added only when the sum is not 0).  0 - no limit -
 * when any container (app or init) has no memory limit (limits[i] == 0),
 * which is also the BestEffort case.  Values in bytes; saturates at
 * UINT64_MAX. */
uint64_t emptydir_pod_memory_limit(const uint64_t *container_limits, size_t n_containers,
                                   const uint64_t *init_limits, size_t n_init, uint64_t overhead);

/* The tmpfs size: the Node's allocatable memory, lowered to the pod's
 * memory limit when 0 < limit <= allocatable, then to the volume's sizeLimit
 * when 0 < sizeLimit <= that.  0 means no size= option (the kernel's
 * default, half of RAM), which is what kubelet mounts when everything is 0. */
uint64_t emptydir_memory_size(uint64_t node_allocatable, uint64_t pod_memory_limit, uint64_t size_limit);

/* Mounts a tmpfs on the directory `name` in dir_fd (name is one component,
 * opened beneath dir_fd without following a symlink; target_path is its
 * full path, for the log; a descriptor of the target itself would not do:
 * opened before the mount it never sees the tmpfs, so the second call could
 * not tell it is there): "size=<bytes>" when size_bytes > 0,
 * "mode=<octal>" when mode != 0 (kubelet passes none: a tmpfs root is then
 * 1777), "context=\"<ctx>\"" when selinux_context is set.  nodev,nosuid are
 * NOT added: kubelet mounts with none of them.  Idempotent as kubelet's
 * setupTmpfs: when target is already the root of a tmpfs, nothing is done
 * (0); 1 when mounted.  May block (mount): call it off the event loop. */
int tmpfs_mount(int dir_fd, const char *name, const char *target_path, uint64_t size_bytes, mode_t mode,
                const char *selinux_context, const LogFields *log);
