/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the volume manager's files share: the actual state of the world, the
 * operations that change it, and the manager object.  Not a public API. */

#include <sys/types.h>

#include "csi/csi.h"
#include "k8s/events.h"
#include "k8s/informer.h"
#include "systemd/hashmap.h"
#include "volume/backoff.h"
#include "volume/desired.h"
#include "volume/manager.h"
#include "volume/mounttable.h"
#include "volume/rootdir.h"
#include "volume/watches.h"

/* kubelet's podAttachAndMountTimeout: a volume waiting this long for its
 * attachment gets a FailedAttachVolume event. */
#define ATTACH_WAIT_WARNING_USEC (2 * USEC_PER_MINUTE + 3 * USEC_PER_SEC)

typedef enum StageState {
        STAGE_NONE,      /* nothing at the staging path */
        STAGE_DONE,      /* NodeStageVolume succeeded (or no staging needed and the dirs are made) */
        STAGE_UNCERTAIN, /* a call timed out or failed non-finally: may be staged */
} StageState;

typedef enum PublishState {
        PUBLISH_DONE,
        PUBLISH_UNCERTAIN,
} PublishState;

typedef struct ActualPublish {
        char *pod_uid;
        char *pod_key;   /* namespace/name, for logs */
        char *spec_name;
        char *target;    /* relative to root-dir */
        PublishState state;
        bool not_a_mount; /* the driver's publish made no mount point: nothing to watch */
} ActualPublish;

typedef struct Operation Operation;

/* One volume as this node has it: keyed by the unique name (per PV for
 * persistent volumes, per pod and volume for inline ones). */
typedef struct ActualVolume {
        char *unique_name;
        VolumeLifecycle lifecycle;
        char *driver;
        char *handle;
        char *spec_name;
        StageState stage;
        bool staged_mount;      /* the staging path was a mount point after NodeStageVolume */
        bool desired;           /* some pod wants it (this pass) */
        bool attachable;        /* last known: reported in volumesInUse */
        uint64_t attach_wait_since; /* CLOCK_MONOTONIC; 0: not waiting */
        bool attach_warned;
        Hashmap *publishes;     /* pod UID → ActualPublish */
        Operation *op;          /* at most one operation per volume at a time */
        Hashmap *backoffs;      /* "<kind>/<pod UID>" → Backoff */
} ActualVolume;

typedef enum OpKind {
        OP_STAGE,
        OP_PUBLISH,
        OP_UNPUBLISH,
        OP_UNSTAGE,
        _OP_KIND_MAX,
} OpKind;

/* The pod an operation works for, copied: the pod may go meanwhile. */
typedef struct PodInfo {
        char *uid;
        char *namespace;
        char *name;
        char *key;
        char *service_account;
        bool has_fs_group;
        int64_t fs_group;
        char *fs_group_change_policy;
} PodInfo;

struct Operation {
        VolumeManager *m;
        OpKind kind;
        ActualVolume *av;
        VolumeSpec *spec;       /* a copy; NULL for teardown */
        PodInfo pod;            /* publish and unpublish */
        char *target;           /* relative: publish target or staging target */
        unsigned step;
        uint64_t start_usec;
        /* Gathered along the way. */
        bool stage_capable;
        bool mount_group_capable;
        bool multi_writer_capable;
        K8sSecret *secret;
        K8sStringMap publish_context;
        CsiCall *call;
        bool called;            /* the CSI call was made: a failure may have effects */
        pid_t fsgroup_pid;
        sd_event_source *fsgroup_source;
        int error;              /* the failure being reported, -errno */
        char *message;          /* its text */
        bool uncertain;         /* the failure leaves the volume maybe mounted */
};

/* A pod as the manager tracks it. */
typedef struct PodEntry {
        char *uid;
        char *namespace;
        char *name;
        char *resource_version;
        DesiredPod *desired;    /* NULL: its volumes are not wanted */
        bool dirty;             /* desired must be rebuilt */
        char *reported_invalid; /* an invalid-name event was sent */
        Hashmap *reported;      /* volume name → the last wait/failure message sent as an event */
} PodEntry;

typedef struct DriverCaps {
        bool known;
        CsiNodeCapabilities caps;
} DriverCaps;

struct VolumeManager {
        sd_event *event;
        K8sClient *k8s;
        CsiClient *csi;
        char *node_name;
        uint64_t resync_interval_usec;
        RootDir *root;

        K8sInformer *pods, *csidrivers, *node;
        ObjectWatches *watches;
        MountTable *mounts;     /* under root-dir; its changes wake the reconciler */
        K8sEventRecorder *events;

        Hashmap *pod_entries;   /* UID → PodEntry */
        Hashmap *volumes;       /* unique name → ActualVolume */
        Hashmap *caps;          /* driver → DriverCaps */

        sd_event_source *pass_source;    /* deferred: one pass for a burst of changes */
        sd_event_source *retry_timer;    /* the next backoff expiry */
        sd_event_source *resync_timer;
        unsigned n_running;
        bool stopping;
        volume_manager_stopped_t stopped;
        void *stopped_userdata;

        /* volumesInUse: what we last patched successfully, what we want. */
        char **in_use_reported;
        char **in_use_wanted;
        char **in_use_inherited; /* listed by the Node at start and still staged on disk */
        bool in_use_patching;
        bool in_use_synced;     /* one patch went through since start */
        uint64_t in_use_retry_at; /* after a failed patch */

        volume_metrics_hook_t metrics_hook;
        void *metrics_userdata;
        volume_pass_hook_t pass_hook;
        void *pass_userdata;
};

/* manager.c */
void manager_schedule_pass(VolumeManager *m);
void manager_pod_event(VolumeManager *m, const PodInfo *pod, const char *type, const char *reason,
                       const char *format, ...) _printf_(5, 6);
const K8sCSIDriver *manager_csidriver(VolumeManager *m, const char *driver);
bool manager_attachable(VolumeManager *m, const char *driver);
void manager_operation_done(VolumeManager *m, Operation *op, bool success);

/* actual.c */
ActualVolume *actual_volume_new(const VolumeSpec *spec);
ActualVolume *actual_volume_free(ActualVolume *av);
int actual_publish_set(ActualVolume *av, const PodInfo *pod, const char *spec_name, const char *target,
                       PublishState state);
void actual_publish_remove(ActualVolume *av, const char *pod_uid);
Backoff *actual_backoff(ActualVolume *av, OpKind kind, const char *pod_uid, bool create);
void actual_backoff_forget(ActualVolume *av, OpKind kind, const char *pod_uid);
const char *op_kind_to_string(OpKind kind);

int pod_info_from_desired(const DesiredPod *p, PodInfo *ret);
int pod_info_copy(const PodInfo *from, PodInfo *to);
void pod_info_done(PodInfo *p);

/* operations.c */
/* Creates the directories and metadata an operation needs before its CSI
 * call (not yet durable: the pass syncs once for all), then starts it. */
int operation_new(VolumeManager *m, OpKind kind, ActualVolume *av, const VolumeSpec *spec, const PodInfo *pod,
                  Operation **ret);
int operation_prepare(Operation *op);
/* Runs it; it ends through manager_operation_done(), possibly at once. */
void operation_start(Operation *op);
/* Frees it, cancelling a CSI call in flight. */
Operation *operation_free(Operation *op);
