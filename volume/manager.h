/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The volume manager: the desired state from the API (the pods bound to this
 * node and what their CSI volumes need), the actual state from its own
 * operations, and a reconciler that turns the difference into CSI calls, per
 * volume, in parallel, each with its own backoff.  Work is event-driven: an
 * informer event marks what changed and one deferred pass handles a burst. */

#include <stdint.h>
#include <systemd/sd-event.h>

#include "csi/csi.h"
#include "k8s/client.h"
#include "systemd/macro.h"

typedef struct VolumeManager VolumeManager;

typedef struct VolumeManagerOptions {
        const char *node_name;
        const char *root_dir;         /* absolute */
        uint64_t resync_interval_usec; /* safety-net full pass; 0: 5 min */
        uint64_t republish_interval_usec; /* [csi] republish-interval; 0: 1 min */
} VolumeManagerOptions;

typedef struct VolumeManagerStats {
        unsigned pods;          /* pods on this node the manager tracks */
        unsigned desired;       /* pod volumes wanted */
        unsigned waiting;       /* ... of which wait for something (claim, attachment, driver) */
        unsigned published;     /* publishes confirmed */
        unsigned uncertain;     /* publishes or stages that may or may not be there */
        unsigned staged;
        unsigned running;       /* operations in flight */
} VolumeManagerStats;

/* For storage_operation_duration_seconds: plugin "kubernetes.io/csi:<driver>",
 * operation "volume_mount", "volume_unmount", "mount_device", "unmount_device",
 * and for raw block volumes "map_volume", "unmap_volume", "unmap_device". */
typedef void (*volume_metrics_hook_t)(const char *plugin, const char *operation, bool success,
                                      uint64_t duration_usec, void *userdata);

typedef void (*volume_manager_stopped_t)(VolumeManager *m, void *userdata);

/* Borrows the clients (they must outlive the manager). */
int volume_manager_new(sd_event *event, K8sClient *k8s, CsiClient *csi, const VolumeManagerOptions *options,
                       VolumeManager **ret);
/* Starts the informers and plugin registration; the first pass runs once
 * the pods, CSIDrivers and Node are listed. */
int volume_manager_start(VolumeManager *m);
/* Starts no new operation; "stopped" is called (from the loop) once none
 * runs any more.  Nothing is torn down because the agent stops. */
void volume_manager_stop(VolumeManager *m, volume_manager_stopped_t stopped, void *userdata);
VolumeManager *volume_manager_free(VolumeManager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(VolumeManager *, volume_manager_free);

/* A configuration reload: the NodePublishVolume cadence of requiresRepublish
 * drivers, for republishes scheduled from now on (0: 1 min). */
void volume_manager_set_republish_interval(VolumeManager *m, uint64_t usec);

void volume_manager_set_metrics_hook(VolumeManager *m, volume_metrics_hook_t hook, void *userdata);

/* Called after every reconcile pass with its duration, for kvolumed_reconcile_seconds. */
typedef void (*volume_pass_hook_t)(uint64_t duration_usec, void *userdata);
void volume_manager_set_pass_hook(VolumeManager *m, volume_pass_hook_t hook, void *userdata);
void volume_manager_get_stats(VolumeManager *m, VolumeManagerStats *ret);
/* True once the pods, CSIDrivers and Node have each been listed (reconstruction
 * is done before volume_manager_new() returns): what READY=1 waits for.  The
 * pass hook is first called right after this becomes true. */
bool volume_manager_synced(VolumeManager *m);
