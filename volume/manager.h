/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The volume manager: the desired state from the API (the pods bound to this
 * node and what their volumes need), the actual state from its own
 * operations, and a reconciler that turns the difference into operations
 * (for CSI volumes, CSI calls), per volume, in parallel, each with its own
 * backoff.  Work is event-driven: an informer event marks what changed and
 * one deferred pass handles a burst.
 *
 * Its districts: volume/state/ (what is wanted and what is there),
 * volume/passes/ (the reconciler, reconstruction, the operation frame),
 * volume/kinds/ (each kind of volume behind one interface, volume/kind.h,
 * whose header has the map), volume/host/ (root-dir and the mount table);
 * this header, podview.h and runtime.h are what the agent sees. */

#include <stdint.h>
#include <systemd/sd-event.h>

#include "csi/csi.h"
#include "k8s/client.h"
#include "systemd/macro.h"
#include "volume/host/rootlock.h"

typedef struct VolumeManager VolumeManager;

/* Operations started and unfinished per driver, per CSI call the client
 * runs at once (max-parallel): that many and three times as many queued to
 * keep its pipe full; the rest wait as names (volume/passes/slices.c). */
#define VOLUME_PENDING_PER_PARALLEL 4u

typedef struct VolumeManagerOptions {
        const char *node_name;
        const char *root_dir;         /* absolute: root_lock_path(root_lock) */
        /* root-dir, locked and resolved (borrowed: it must outlive the
         * manager); its directory is the one every record is written to. */
        RootLock *root_lock;
        uint64_t resync_interval_usec; /* safety-net full pass; 0: 5 min */
        uint64_t republish_interval_usec; /* [csi] republish-interval; 0: 1 min */
        uint64_t expand_check_interval_usec; /* [agent] expand-check-interval; 0: 1 min */
        uint64_t attach_limit_refresh_usec;  /* [csi] attach-limit-refresh-interval; 0: off */
        bool selinux_mount_all;       /* [volumes] selinux-mount-all */
        const char *runner_kinds;     /* [volumes] runner-kinds, "nfs, image"; NULL: none */
        const char *runtime_endpoint; /* [runtime] endpoint; NULL: teardown on the API's word alone */
        bool mount_source_mountinfo;  /* [agent] mount-source = mountinfo: never the kernel's mount events */
        /* Tests (KVOLUMED_TEST_VERIFY_INCREMENTAL): after every scoped pass, a
         * full one checks that it would start nothing more, and logs
         * "Incremental pass missed" if it would. */
        bool verify_incremental;
        /* Tests (KVOLUMED_TEST_PREPARE_DELAY_MS): each operation's records
         * take this long to write, as on a slow or busy root-dir file system. */
        uint64_t prepare_delay_usec;
        /* Operations started and unfinished per driver (volume/passes/slices.c);
         * 0: VOLUME_PENDING_PER_PARALLEL x 64.  The agent gives
         * VOLUME_PENDING_PER_PARALLEL x [csi] max-parallel. */
        unsigned max_pending;
} VolumeManagerOptions;

/* The one state of each pod volume on the node (kvolumed_volumes{state}):
 * every volume a pod wants is in exactly one of the first three, and a
 * publish no pod wants any more is tearing-down. */
typedef enum PodVolumeState {
        POD_VOLUME_FAILED,       /* not published, and something failed: a claim not bound, a driver not
                                  * registered after its grace, a lifecycle mode refused, a CSI call failed */
        POD_VOLUME_PENDING,      /* not published yet, nothing failed: work in progress or a wait in its grace */
        POD_VOLUME_PUBLISHED,
        POD_VOLUME_TEARING_DOWN, /* published for a pod that no longer wants it */
        _POD_VOLUME_STATE_MAX,
} PodVolumeState;

/* "failed", "pending", "published", "tearing-down". */
const char *pod_volume_state_to_string(PodVolumeState s);

/* Why a failed pod volume failed, for kvolumed_volumes_failed{reason}: the
 * first three are the tenant's to fix (their pod or claim), the others the
 * node's (its drivers, its attachments, the storage). */
typedef enum PodVolumeFailure {
        POD_VOLUME_FAILURE_NONE,
        POD_VOLUME_FAILURE_CLAIM,          /* "claim-not-bound": its claim is not bound, or it or its PV is missing */
        POD_VOLUME_FAILURE_INVALID_SPEC,   /* "invalid-spec": a volume the pod spec cannot have */
        POD_VOLUME_FAILURE_REFUSED,        /* "refused": a lifecycle mode the CSIDriver refuses, a ReadWriteOncePod
                                            * claim or an SELinux label in use by another pod */
        POD_VOLUME_FAILURE_DRIVER_MISSING, /* "driver-missing": its CSI driver is not registered after its grace */
        POD_VOLUME_FAILURE_CSI,            /* "csi-error": a CSI call failed and waits for its retry */
        POD_VOLUME_FAILURE_ATTACH,         /* "attach-timeout": no attachment after its wait, or an attach error */
        POD_VOLUME_FAILURE_ATTACH_LIMIT,   /* "attach-limit": the driver's attach limit on the node is reached */
        POD_VOLUME_FAILURE_SOURCE_CHANGED, /* "source-changed": its PV was re-created while published */
        _POD_VOLUME_FAILURE_MAX,
} PodVolumeFailure;

/* The label value above; NULL for NONE. */
const char *pod_volume_failure_to_string(PodVolumeFailure f);
/* Whether the tenant fixes it (its pod or claim), not the node's operator. */
bool pod_volume_failure_is_tenants(PodVolumeFailure f);

typedef struct VolumeManagerStats {
        unsigned pods;          /* pods on this node the manager tracks */
        unsigned desired;       /* pod volumes wanted */
        unsigned waiting;       /* ... of which wait for something (claim, attachment, driver) */
        unsigned published;     /* publishes confirmed */
        unsigned uncertain;     /* publishes or stages that may or may not be there */
        unsigned staged;
        unsigned running;       /* operations in flight */
        unsigned attach_waiting; /* volumes waiting for their attachment */
        unsigned failing;       /* volumes with an operation that failed and waits to be retried */
        unsigned unresponsive;  /* volumes whose file system did not answer */
        unsigned by_state[_POD_VOLUME_STATE_MAX]; /* pod volumes by PodVolumeState */
        uint64_t visited;       /* pods, volumes and publishes the passes and mount changes looked at, in all */
        unsigned held_back;     /* operations due, left for a later slice (volume/passes/slices.c) */
        unsigned mounts_pending; /* stages and publishes whose mount the next mount table read settles */
        unsigned mounts_seen;   /* mount targets under root-dir when the manager last heard of a change */
} VolumeManagerStats;

/* For storage_operation_duration_seconds: plugin "kubernetes.io/csi:<driver>",
 * operation "volume_mount", "volume_unmount", "mount_device", "unmount_device",
 * and for raw block volumes "map_volume", "unmap_volume", "unmap_device";
 * migrated: an in-tree volume CSI migration serves (kubelet's Spec.Migrated). */
typedef void (*volume_metrics_hook_t)(const char *plugin, const char *operation, bool success, bool migrated,
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

/* root-dir is the path, not the directory found there at start (volume/host/
 * rootwatch.c): when the path stops naming the directory kvolumed locked (a
 * file system mounted over it, the directory renamed and made again, a
 * symlink in its path changed), the manager stops acting on volumes — no
 * CSI call, no record written, no teardown — until it names it again.
 * NULL while it does; else why not, for a person. */
const char *volume_manager_root_lost(VolumeManager *m);
/* Called when root-dir stops or starts again being that directory, with
 * volume_manager_root_lost()'s answer. */
typedef void (*volume_root_hook_t)(const char *lost, void *userdata);
void volume_manager_set_root_hook(VolumeManager *m, volume_root_hook_t hook, void *userdata);
/* The same from counts kept as things change (volume/state/counts.c),
 * by_state too: only the pods and volumes that changed since the last read
 * are judged again (volume/state/podstate.c's judgement).  What the status
 * line, kvolumed_volumes and /volumes show: the walk of
 * volume_manager_get_stats() took 23 ms of the loop beside 10,000 volumes,
 * and a new pod arriving then waited for it (issues 23 and 31). */
void volume_manager_get_counts(VolumeManager *m, VolumeManagerStats *ret);

/* For kvolumed_volumes_failed{driver_name,reason}: once per pair with a
 * failed pod volume.  driver is "" for a volume with no CSI driver (or not
 * known yet), the driver's name when an administrator named it (a PV's, a
 * CSIDriver object's, a driver registered on the node), else "other": a
 * name only a pod spec gives cannot multiply the series. */
typedef void (*volume_failed_count_t)(const char *reason, const char *driver, unsigned n, void *userdata);
void volume_manager_count_failed(VolumeManager *m, volume_failed_count_t cb, void *userdata);
/* Seconds since the oldest pod volume not published was first wanted, as
 * kvolumed saw it (since its start at most); 0 when there is none: among
 * those pending or failed for the node's reason, and among those failed
 * for a tenant's reason. */
void volume_manager_oldest_unready(VolumeManager *m, double *ret_node, double *ret_tenant);
/* The drivers (bounded as above, "other" left out) that pod volumes on the
 * node want, once each, for kvolumed_csi_driver_registered. */
typedef void (*volume_driver_t)(const char *driver, void *userdata);
void volume_manager_foreach_wanted_driver(VolumeManager *m, volume_driver_t cb, void *userdata);

/* For kvolumed_runtime_*: the runtime gate's counters (volume/runtime.c);
 * all zero when no runtime is configured. */
typedef struct VolumeRuntimeStats {
        bool configured;
        bool unreachable;
        uint64_t errors;  /* rounds of CRI calls that failed */
        uint64_t rounds;  /* rounds started */
        unsigned waiting; /* pods whose unpublish waits for the runtime */
} VolumeRuntimeStats;
void volume_manager_get_runtime_stats(VolumeManager *m, VolumeRuntimeStats *ret);
/* What /volumes serves (volume/describe.c): the counters of
 * volume_manager_get_stats() and every volume the manager tracks, with its
 * attach, stage and publish state, uncertainty, last error and next retry,
 * and the pods' volumes that wait for something, as one JSON object. */
int volume_manager_describe_json(VolumeManager *m, char **ret);
/* True once the pods, CSIDrivers and Node have each been listed (reconstruction
 * is done before volume_manager_new() returns): what READY=1 waits for.  The
 * pass hook is first called right after this becomes true. */
bool volume_manager_synced(VolumeManager *m);
/* What READY=1 still waits for, for a person: "the first pod list", "the
 * first CSIDriver list", "node NAME"; NULL when synced. */
const char *volume_manager_waiting_for(VolumeManager *m);

/* ---- volume stats (stats.c) and counts (state/) for the metrics ---------------- */

/* For volume_manager_total_volumes{plugin_name,state}, as kubelet counts:
 * per plugin, the pod volumes wanted that resolved to a volume (desired)
 * and the publishes confirmed (actual), once per plugin with a count.
 * plugin_name is the kind's (kubernetes.io/csi, kubernetes.io/empty-dir,
 * ...), driver a CSI volume's driver and NULL for the other kinds
 * (state/plugins.c). */
typedef void (*volume_count_t)(const char *plugin_name, const char *driver, unsigned desired, unsigned actual,
                               void *userdata);
void volume_manager_count_volumes(VolumeManager *m, volume_count_t cb, void *userdata);

/* For kvolumed_api_watch_restarts_total{resource}: the watches of the pods,
 * CSIDrivers and Node informers started beyond the first of each. */
typedef void (*volume_watch_count_t)(const char *resource, unsigned restarts, void *userdata);
void volume_manager_count_watch_restarts(VolumeManager *m, volume_watch_count_t cb, void *userdata);

/* NodeGetVolumeStats of every published volume of a PVC (kubelet exports
 * stats for those only), for drivers with GET_VOLUME_STATS: one round per
 * driver every interval (jittered, so that drivers and restarts do not
 * line up), at most VOLUME_STATS_MAX_IN_FLIGHT calls in flight per driver,
 * each cut off at its own deadline.  The calls go through their own limit in
 * the CSI client, so a slow driver never delays a stage or publish. */
#define VOLUME_STATS_DEFAULT_INTERVAL_USEC USEC_PER_MINUTE
#define VOLUME_STATS_DEFAULT_TIMEOUT_USEC (10 * USEC_PER_SEC)
#define VOLUME_STATS_MAX_IN_FLIGHT 2u

typedef struct VolumeStats VolumeStats;

typedef struct VolumeStatsSample {
        const char *namespace;
        const char *claim; /* persistentvolumeclaim */
        const char *driver;
        bool has_bytes;
        int64_t capacity_bytes, available_bytes, used_bytes;
        bool has_inodes;
        int64_t inodes, inodes_free, inodes_used;
        bool has_condition; /* the driver has VOLUME_CONDITION and said */
        bool abnormal;
} VolumeStatsSample;

/* interval_usec 0: no stats at all; timeout_usec 0: 10 s.  Borrows the
 * manager, which must outlive it. */
int volume_stats_new(VolumeManager *m, uint64_t interval_usec, uint64_t timeout_usec, VolumeStats **ret);
/* Cancels the calls in flight. */
VolumeStats *volume_stats_free(VolumeStats *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(VolumeStats *, volume_stats_free);
/* A configuration reload, for rounds scheduled from now on (interval 0:
 * off, and the samples are dropped). */
void volume_stats_set_interval(VolumeStats *s, uint64_t interval_usec, uint64_t timeout_usec);
/* The agent stops: calls in flight are cancelled, no round starts again. */
void volume_stats_stop(VolumeStats *s);
/* The latest answer for each claim whose volume is still published, one
 * per claim (the first pod's, as kubelet's collector), sorted by namespace
 * and claim.  A volume whose last call failed has no sample. */
typedef void (*volume_stats_sample_t)(const VolumeStatsSample *sample, void *userdata);
void volume_stats_foreach(VolumeStats *s, volume_stats_sample_t cb, void *userdata);
