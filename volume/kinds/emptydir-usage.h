/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What an emptyDir holds, for /volumes (issue 32): "usage" with usedBytes,
 * capacityBytes (the tmpfs's size for medium: Memory; null on disk) and
 * measuredAt.  A tmpfs is asked on the loop (statfs of kvolumed's own
 * tmpfs never blocks); a disk one is walked off the loop as du counts it,
 * cached, and walked again at most once per [csi] stats-interval (0: not
 * measured), when /volumes is asked.  kubelet exports
 * kubelet_volume_stats_* only for volumes with a claim, so an emptyDir
 * has no metric here either. */

#include <stdint.h>

typedef struct ActualVolume ActualVolume;
typedef struct VolumeManager VolumeManager;
typedef struct cJSON cJSON;

/* The kind's setup and free hooks: the manager whose loop and root-dir the
 * walks use. */
int emptydir_usage_setup(VolumeManager *m);
void emptydir_usage_free(VolumeManager *m);
/* [csi] stats-interval, set at start and on reload (agent.c). */
void emptydir_usage_set_interval(uint64_t interval_usec);
/* The kind's describe hook. */
int emptydir_usage_describe(const ActualVolume *av, cJSON *into);
