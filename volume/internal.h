/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the volume manager's files share: the actual state of the world, the
 * operations that change it, and the manager object.  Not a public API. */

#include <sys/types.h>

#include "csi/csi.h"
#include "k8s/events.h"
#include "k8s/informer.h"
#include "systemd/hashmap.h"
#include "systemd/log.h"
#include "volume/host/mounttable.h"
#include "volume/host/rootdir.h"
#include "volume/host/selinux.h"
#include "volume/kind.h"
#include "volume/manager.h"
#include "volume/passes/resync.h"
#include "volume/runtime.h"
#include "volume/state/backoff.h"
#include "volume/state/desired.h"
#include "volume/state/intent.h"
#include "volume/state/watches.h"

/* kubelet's podAttachAndMountTimeout: a volume waiting this long for its
 * attachment gets a FailedAttachVolume event. */
#define ATTACH_WAIT_WARNING_USEC (2 * USEC_PER_MINUTE + 3 * USEC_PER_SEC)

/* A volume whose driver is not registered waits this long before a
 * FailedMount says so: kubelet's budget for one plugin registration (dial
 * 10 s, GetInfo 1 s, NotifyRegistrationStatus 5 s, kubelet-facts §7) and
 * some slack.  The drivers in plugins_registry register again within it
 * after a restart, and a driver's pod restarting usually does too. */
#define DRIVER_WAIT_GRACE_USEC (20 * USEC_PER_SEC)

typedef enum StageState {
        STAGE_NONE,      /* nothing at the staging path */
        STAGE_DONE,      /* NodeStageVolume succeeded (or no staging needed and the dirs are made) */
        STAGE_UNCERTAIN, /* a call timed out or failed non-finally: may be staged */
} StageState;

typedef enum PublishState {
        PUBLISH_DONE,
        PUBLISH_UNCERTAIN,
} PublishState;

/* Its four strings never change and live in the same allocation as the
 * struct (actual.c): one chunk instead of five, ~90 bytes less a publish. */
typedef struct ActualPublish {
        const char *pod_uid; /* also its key in the volume's publishes */
        const char *pod_key;   /* namespace/name, for logs */
        const char *spec_name; /* this pod's name of the volume: two PVs may share a handle */
        const char *target;    /* relative to root-dir */
        PublishState state;
        bool not_a_mount; /* the driver's publish made no mount point: nothing to watch */
        bool stale;       /* found on disk from a previous boot: nothing is mounted, dirs remain */
        bool mount_pending; /* published: whether a mount resulted is for the next mount table read */
        uint64_t republish_at; /* republish.c: CLOCK_MONOTONIC when NodePublishVolume is due again; 0: unknown */
        /* Uncertain with its NodePublishVolume answered OK: a step after the
         * call (fsGroup, the expansion's claim read) failed.  The retry
         * resumes after the call while the target is still mounted
         * (operations.c); in memory only, a restart repeats the call. */
        bool call_done;
        /* The same for NodeUnpublishVolume: it answered OK, nothing is
         * mounted there, and the directories could not be removed. */
        bool unpublish_call_done;
        /* A kind that writes the files itself (volume/kinds/files/): the
         * digest of the content it last wrote there; none: not known (found
         * after a restart), compared by writing. */
        bool has_content_digest;
        uint8_t content_digest[32];
} ActualPublish;

typedef struct Operation Operation;
typedef struct OpTokens OpTokens;

/* counts.c: what the status line shows, kept in step as the volumes and
 * pods change instead of counted by a walk of the node once a second (that
 * walk took 8 ms of the loop beside 10,000 volumes; issue 23).  The fields
 * of a volume and its publishes that feed it change only through actual.c's
 * setters, which apply the difference while the volume is in the manager. */
typedef struct VolumeCounts {
        unsigned published, uncertain, staged, attach_waiting, unresponsive, mounts_pending;
        unsigned desired, waiting; /* pod volumes, from the pods' desired state */
        /* The pod volumes by state (podstate.c's judgement): each pod's
         * desired volumes, and the publishes tearing down.  A judgement reads
         * its pod and the volume it resolves to, so a change of either marks
         * them stale (pod UIDs, unique names → non-NULL) and a read judges
         * only those again: no walk of the node (issue 31). */
        unsigned by_state[_POD_VOLUME_STATE_MAX];
        Hashmap *stale_pods, *stale_volumes;
        /* Non-persistent unique name → the PodEntry that wants it (one pod
         * each; the persistent ones' pods are in wanters.c). */
        Hashmap *inline_wanters;
        /* unique name → ActualVolume: those with a backoff, of which the
         * failing ones are (the rest belong to pods gone or publishes torn down). */
        Hashmap *with_backoffs;
        bool broken; /* out of memory once: counts_get() walks the node instead */
        /* Pod volumes judged so far (describe_pod_volume()): the tests see
         * what a scrape judged through the trace (podstate.c). */
        uint64_t judged;
        /* The pod volumes and publishes by plugin (plugins.c): key → PluginTally. */
        Hashmap *plugins;
} VolumeCounts;

typedef struct PluginTally PluginTally;
/* What a pod added to a plugin's tally (plugins.c), to take back. */
typedef struct PodPluginCount {
        PluginTally *tally;
        unsigned n, n_persistent;
} PodPluginCount;

typedef struct PodIndex PodIndex;
typedef struct MountWatch MountWatch;
typedef struct RootWatch RootWatch;
typedef struct Wakes Wakes;
typedef struct FsGroupWalk FsGroupWalk;
typedef struct OffloopJob OffloopJob;

/* One volume as this node has it: keyed by the unique name (per PV for
 * persistent volumes, per pod and volume for inline ones). */
typedef struct ActualVolume {
        const VolumeKind *kind; /* what sets it up and tears it down (volume/kind.h) */
        /* unique_name, driver and handle never change and live in the same
         * allocation as the struct (actual.c); spec_name may be renamed at
         * reconstruction. */
        const char *unique_name; /* also its key in the manager's maps */
        ResyncLink resync;      /* in the rolling resync's order (manager.c), while in m->volumes */
        VolumeLifecycle lifecycle;
        bool block;             /* a raw block volume (volumeMode Block, used through volumeDevices) */
        const char *driver;
        const char *handle;
        char *spec_name;
        /* VolumeSpec.migrated_from of the spec it was last set up with in
         * this process (NULL after a restart, as kubelet's reconstructed
         * spec is not Migrated): the migrated label of its teardown's metrics. */
        const char *migrated_from;
        StageState stage;
        bool staged_mount;      /* the staging path was a mount point after NodeStageVolume */
        bool stage_stale;       /* staging dirs found from a previous boot: nothing mounted */
        bool mount_pending;     /* staged: whether a mount resulted is for the next mount table read */
        bool reconstructed;     /* found on disk at start-up */
        bool desired;           /* some pod wants it (this pass) */
        /* Belongs in volumesInUse: once true, stays true until the volume is
         * unstaged with no publish left, whatever its CSIDriver says meanwhile. */
        bool attachable;
        bool unstage_held;      /* the guard found other mounts of it: reported once */
        bool unstage_call_done; /* NodeUnstageVolume answered OK, dirs stayed: retry without it */
        bool driver_wait_logged; /* "teardown waits for the driver" said once */
        uint64_t driver_wait_since; /* CLOCK_MONOTONIC since a pod wants it and its driver is not registered; 0: not waiting */
        uint64_t attach_wait_since; /* CLOCK_MONOTONIC; 0: not waiting */
        bool attach_warned;
        Hashmap *publishes;     /* pod UID → ActualPublish */
        /* Operations in flight: a stage or unstage excludes every other
         * operation of the volume; publishes and unpublishes of different
         * pods run side by side (kubernetes/kubernetes#113553), one per pod. */
        Operation *op;          /* the stage or unstage */
        Hashmap *pod_ops;       /* pod UID → its publish or unpublish */
        bool expanding;         /* expand.c: an online expansion runs; no operation starts meanwhile */
        Hashmap *backoffs;      /* "<kind>/<pod UID>" → Backoff */
        /* What /volumes and the status say of it (describe.c). */
        char *last_error;       /* the message of its last failed operation; NULL once none fails */
        char *last_error_pod;   /* that operation's pod UID; NULL for a stage or unstage */
        OpKind last_error_op;
        bool last_error_final;  /* its CSI call answered a final code: podview.c reports it to the runner */
        uint64_t last_error_at; /* CLOCK_REALTIME */
        /* CLOCK_REALTIME when its file system was found not answering (a
         * walk made no progress before its deadline); 0: it answers. */
        uint64_t unresponsive_since;
        /* The context= mount option it is staged and published with (NULL:
         * none), from the operation that set it up or its vol_data.json: a
         * mount has one context, so every pod using it must want this one. */
        char *selinux_context;
        bool selinux_restage;   /* this pass: staged with a context no pod wants, and unused */
        /* podindex.c: the manager's index of pods, told of every change of
         * publishes and pod_ops (actual.c); NULL while not in the manager. */
        PodIndex *pod_index;
        /* counts.c: the manager's counts this volume is part of; NULL while
         * not in the manager. */
        VolumeCounts *counts;
        unsigned counted_tearing_down; /* its publishes in VolumeCounts.by_state[TEARING_DOWN] */
} ActualVolume;

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
        char *spec_name;        /* the pod's name of the volume (publish, unpublish) or the volume's */
        char *target;           /* relative: publish target or staging target */
        char *device, *device_serial, *device_link; /* raw block: what the driver published */
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
        /* The failure is this CSI call's answer (CSI_METHOD=, CSI_CODE=;
         * static strings); NULL when it was found outside any call. */
        const char *failed_method, *failed_code;
        bool call_ok;           /* ... and answered OK (in this attempt or, resuming, an earlier one) */
        bool resume;            /* an earlier attempt's call answered OK: resume after it */
        FsGroupWalk *fsgroup;   /* the ownership change in flight */
        OffloopJob *job;        /* a kind's work off the loop in flight (volume/host/offloop.h) */
        bool subpaths_done;     /* publish: its subPaths prepared; unpublish: removed (passes/subpaths.c) */
        bool unresponsive;      /* the failure: its file system did not answer */
        int error;              /* the failure being reported, -errno */
        char *message;          /* its text */
        char *selinux_context;  /* stage, publish: the context= mount option it passes; NULL: none */
        bool uncertain;         /* the failure leaves the volume maybe mounted */
        /* The failure is the pod's to fix (a subPath that leaves its volume):
         * final for the runner, which hears it at once, even where the
         * volume itself stays set up (uncertain) and is tried again. */
        bool final;
        OpTokens *tokens;       /* tokens.c: the service account tokens of a publish */
        bool republish;         /* a publish of a volume already published: its failure changes nothing */
        bool beside_others;     /* its CSI call went out while another of the volume's was in flight */
        bool refused_beside_others; /* ... and the driver answered ABORTED: it does one call per volume */
        /* Set by the kind's run: a failure now leaves a publish whose retry
         * resumes after its call (ActualPublish.call_done). */
        bool resume_after_call;
        bool previous_boot;     /* a teardown of what a previous boot set up: nothing of it is mounted */
};

/* A failed volume of a pod: its index in the pod's desired volumes, and why. */
typedef struct PodFailure {
        size_t volume;
        PodVolumeFailure failure;
} PodFailure;

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
        Hashmap *final;         /* volume name → non-NULL: the latest pass reported a FailedMount (podview.c) */
        Hashmap *report_kinds;  /* volume name → PodVolumeFailure + 1 of the event in reported; NULL until one */
        uint64_t wanted_since;  /* CLOCK_MONOTONIC: when its volumes were first wanted (counts.c) */
        unsigned counted_desired, counted_waiting; /* what desired adds to VolumeCounts (counts.c) */
        unsigned counted_states[_POD_VOLUME_STATE_MAX]; /* its volumes in VolumeCounts.by_state */
        /* The metrics' part of the same judgement (counts.c), read by a
         * scrape without judging each pod volume again: its failed volumes
         * (NULL when none), and whether one is not published, the node's to
         * fix ([0]) or a tenant's ([1]). */
        PodFailure *counted_failures;
        size_t n_counted_failures;
        bool counted_unready[2];
        /* Its desired volumes in the plugins' tallies (plugins.c). */
        PodPluginCount *counted_plugins;
        size_t n_counted_plugins;
        ResyncLink resync;      /* in the rolling resync's order (manager.c) */
} PodEntry;

typedef struct PodWatch PodWatch;

typedef struct DriverTable DriverTable;
typedef struct ExpandTable ExpandTable;
typedef struct PublishRefs PublishRefs;
typedef struct SliceQueue SliceQueue;
typedef struct RootSync RootSync;

typedef struct DriverCaps {
        bool known;
        CsiNodeCapabilities caps;
} DriverCaps;

struct VolumeManager {
        sd_event *event;
        K8sClient *k8s;
        struct ProjectedState *projected; /* kinds/projected.c: the pods' tokens */
        CsiClient *csi;
        char *node_name;
        uint64_t resync_interval_usec;
        uint64_t republish_interval_usec; /* requiresRepublish drivers */
        bool selinux_enabled;   /* the host has SELinux (volume/host/selinux.h), read at start */
        bool selinux_mount_all; /* [volumes] selinux-mount-all */
        char **runner_kinds;    /* [volumes] runner-kinds: sources left to the runner; NULL: none */
        bool warned_other_node; /* a pod of another node came from the API: said once */
        RootDir *root;
        RuntimeGate *runtime;   /* runtime.c: asked before any unpublish; NULL: not configured */

        K8sInformer *pods, *csidrivers, *node;
        ObjectWatches *watches;
        MountTable *mounts;     /* under root-dir; its changes wake the reconciler */
        K8sEventRecorder *events;

        Hashmap *pod_entries;   /* UID → PodEntry */
        Hashmap *volumes;       /* unique name → ActualVolume */
        Hashmap *caps;          /* driver → DriverCaps */
        /* Drivers that refuse concurrent calls on one volume (ABORTED, as the
         * CSI spec allows): their publishes of a shared volume run one at a
         * time.  Learnt from the driver's answers, kept until restart. */
        Hashmap *one_call_per_volume;
        /* "<pod UID>/<spec name>" → unique name of the volume found published
         * there at start-up (reconstruct.c): what the running pod resolved
         * before the restart, which the in-memory pin of manager.c no longer
         * knows.  An entry goes once the pod resolves the same volume again
         * (the pin takes over) or its publish went (reconciler.c). */
        Hashmap *restored_publishes;
        /* Intent records (relative paths) of a newer format than this build
         * knows, found at start-up (a rollback): left as they are; their
         * volumes are kept out of the actual state (never torn down) and no
         * operation may write over them (intent_write refuses). */
        Hashmap *newer_records;
        DriverTable *drivers;   /* drivers.c: what the Node and CSINode say of each driver */
        ExpandTable *expand;    /* expand.c: online expansion of published volumes */
        PublishRefs *publish_refs; /* publishrefs.c: what a scan found on disk, for one loop iteration */
        uint64_t expand_check_interval_usec; /* how often published volumes' claims are read */
        uint64_t attach_limit_refresh_usec;  /* NodeGetInfo again for the attach limit; 0: never */

        sd_event_source *pass_source;    /* deferred: one pass for a burst of changes */
        /* What the next pass looks at: everything, or only the pods and
         * volumes that events named since the last pass (reconciler.c). */
        bool full_pass_wanted;
        Hashmap *dirty_pods;    /* pod UID → non-NULL */
        Hashmap *dirty_volumes; /* unique name → non-NULL */
        /* Test mode (KVOLUMED_TEST_VERIFY_INCREMENTAL): after every scoped
         * pass, a full pass that starts nothing reports what the scoped one
         * missed.  "verifying" is set while it runs. */
        bool verify_incremental;
        bool verifying;
        uint64_t prepare_delay_usec; /* tests: a slow root-dir (KVOLUMED_TEST_PREPARE_DELAY_MS) */
        SliceQueue *slices;     /* slices.c: what a pass could not start yet */
        RootSync *sync;         /* rootsync.c: a pass's records made durable, off the loop */
        Hashmap *wanters;       /* wanters.c: persistent unique name → Hashmap of pod UIDs */
        Hashmap *persistent;    /* the persistent ones of volumes: unique name → ActualVolume */
        bool wanters_broken;    /* out of memory once: scoped passes walk every pod */
        PodIndex *pod_index;    /* podindex.c: pod UID → the volumes it has on the node */
        VolumeCounts counts;    /* counts.c: the status line's */
        MountWatch *mount_watch; /* mountwatch.c: what a change of the mount table concerns */
        /* rootwatch.c: root-dir is not the directory kvolumed locked at
         * start: nothing is done for any volume until it is again. */
        RootWatch *root_watch;
        bool root_lost;
        volume_root_hook_t root_hook;
        void *root_userdata;
        Wakes *wakes;           /* wakes.c: the volumes and pods whose retry timer is due when */
        /* volumesInUse must be computed again (reconciler.c): set by what
         * can change it (a persistent volume planned, an operation of one
         * ended, a full pass, the patch's end), so that a pod event of
         * inline volumes costs no walk over the node's volumes. */
        bool in_use_dirty;
        /* Pods and volumes the passes looked at, in all (the tests read it
         * in /volumes to prove a pod event's cost does not grow with the
         * node). */
        uint64_t visited;
        /* The mount targets under root-dir as of the last change the
         * manager was told of: what /volumes shows, for the tests to know
         * that a change was seen (and its cost counted in visited). */
        unsigned mounts_seen;
        unsigned max_pending;   /* operations started and unfinished, per driver */
        sd_event_source *retry_timer;    /* the next backoff expiry */
        sd_event_source *resync_timer;
        /* The rolling resync (manager.c): the pods and volumes in the order
         * its slices take them; whether a round is under way, how many
         * slices it was given (the timer's step is the interval divided by
         * them), the lookups' epoch it began at, and whether the next pass
         * ends it (the sweep of lookups no slice used, volumesInUse). */
        ResyncList resync_pods, resync_volumes;
        size_t resync_slice_items; /* RESYNC_SLICE_ITEMS; tests: KVOLUMED_TEST_RESYNC_SLICE_ITEMS */
        bool resync_in_round;
        size_t resync_slices;
        uint64_t resync_epoch;
        bool resync_round_ends;
        unsigned n_running;
        bool stopping;
        volume_manager_stopped_t stopped;
        void *stopped_userdata;

        /* volumesInUse: what we last patched successfully, what we want. */
        /* volumesInUse: computed each pass and compared with the Node's. */
        char **in_use_sent;     /* the last list patched successfully ... */
        uint64_t in_use_sent_at; /* ... and when: the informer may not have shown it yet */
        char **in_use_sending;  /* the list of the patch in flight */
        bool in_use_patching;
        uint64_t in_use_retry_at; /* after a failed patch */

        char boot_id[BOOT_ID_MAX];
        bool teardown_logged;   /* "waiting for the pod list before any teardown" said once */

        volume_metrics_hook_t metrics_hook;
        void *metrics_userdata;
        volume_pass_hook_t pass_hook;
        void *pass_userdata;
        PodWatch *pod_watches;  /* podview.c: the runner's waiters */
};

/* manager.c */
/* A pass over every pod and volume: for what may concern any of them (a
 * CSIDriver, the Node, a driver's registration, a lookup's answer, a timer). */
void manager_schedule_pass(VolumeManager *m);
/* A pass over what one pod or one volume concerns: the work of an event
 * follows what changed, not the node's size. */
void manager_schedule_pod_pass(VolumeManager *m, const char *pod_uid);
void manager_schedule_volume_pass(VolumeManager *m, const char *unique_name);
/* Who asks the lookup cache (watches.h) for an object: a pod whose desired
 * volumes read it (its claims and their PVs), or a volume whose attach wait
 * or expansion did (its VolumeAttachment, its PV).  An answer that changed
 * schedules a pass of its askers only.  NULL when out of memory (the
 * cache then takes anyone for an asker). */
char *manager_asker_of_pod(const char *pod_uid);
char *manager_asker_of_volume(const char *unique_name);
/* Lowers the retry timer to "when" if it is later or off (a scoped pass
 * sees only some of the backoffs). */
void manager_lower_retry_timer(VolumeManager *m, uint64_t when);
/* Whether the retry timer is armed for "now" or earlier. */
bool manager_retry_due(VolumeManager *m, uint64_t now);
void manager_arm_retry_timer(VolumeManager *m, uint64_t when);
/* An Event and a log line about a pod's volume, unless it is the last one
 * sent for that volume; _clear forgets it once the volume is fine. */
void manager_report_once(VolumeManager *m, PodEntry *e, const DesiredPod *p, const char *volume, const char *reason,
                         const char *message);
void manager_report_clear(VolumeManager *m, PodEntry *e, const char *volume);
/* The VolumeSourceChanged report: dv now resolves to another volume than the
 * one the running pod keeps. */
void manager_report_source_changed(VolumeManager *m, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
                                   const char *kept_spec_name, const char *kept_unique_name);
/* Rebuilds a pod's desired volumes from the informer's pod and the lookups;
 * a volume once resolved keeps what it resolved to for the pod's lifetime. */
void manager_rebuild_pod(VolumeManager *m, PodEntry *e);
void manager_pod_event(VolumeManager *m, const PodInfo *pod, const char *type, const char *reason,
                       const char *format, ...) _printf_(5, 6);
/* Whether the Node's status.volumesAttached lists the volume. */
bool manager_node_lists_attached(VolumeManager *m, const char *unique_name);
void manager_operation_done(VolumeManager *m, Operation *op, bool success);

/* Whether the driver takes one call per volume at a time, and learning it. */
bool manager_one_call_per_volume(VolumeManager *m, const char *driver);
void manager_learn_one_call_per_volume(VolumeManager *m, const char *driver);

/* reconciler.c */
void reconciler_pass(VolumeManager *m);
/* For the kinds' planning entries (volume/kind.h): the pass's time, a wake
 * of the volume (and pod) at "when", and whether the Node's volumesInUse
 * lists the volume as far as our own patches go. */
uint64_t reconciler_now(const PassState *ps);
void reconciler_wake(VolumeManager *m, PassState *ps, const char *unique_name, const char *pod_uid, uint64_t when);
bool reconciler_in_use_reported(VolumeManager *m, const char *unique_name);
/* The Node informer showed the Node: our last volumesInUse patch may be in it. */
void reconciler_node_seen(VolumeManager *m, const K8sNode *node);
/* Whether the pod still wants its publish of the volume at spec_name's path:
 * a publish it does not want is torn down. */
bool reconciler_pod_wants(VolumeManager *m, const char *pod_uid, const char *unique_name, const char *spec_name);

/* reconstruct.c */
/* Rebuilds the actual state from the volume directories under root-dir,
 * their vol_data.json and intent records (moving an older kvolumed's out of
 * the volume dirs, removing those of volume dirs that are gone), and the
 * mount table: run once at start-up, before any pass. */
/* What the scan found, for its log line; the kinds' reconstruct entries
 * (volume/kind.h) count in it too. */
struct ReconstructScan {
        unsigned staged, published, uncertain, stale, leftovers, skipped, moved, pruned;
};
int reconstruct_actual_state(VolumeManager *m);
/* CSI's reconstruct entries (volume/kinds/csi/kind.c), here with the record
 * reading they share with the scan: kvolumed's records are CSI's layout. */
void reconstruct_csi_publish(VolumeManager *m, ReconstructScan *c, const char *pod_uid, const char *spec_name);
void reconstruct_csi_staging(VolumeManager *m, ReconstructScan *c);
void reconstruct_csi_block(VolumeManager *m, ReconstructScan *c);

/* drivers.c: driver registration (registered and static drivers) recorded
 * on the Node and CSINode, and restored when the Node loses it. */
int drivers_setup(VolumeManager *m);
/* Writes the controller-managed annotation (and whatever is pending). */
void drivers_start(VolumeManager *m);
/* The node informer's Node, added or updated. */
void drivers_node_changed(VolumeManager *m, const K8sNode *node);
void drivers_free(VolumeManager *m);
/* Asks the driver NodeGetInfo again for its max_volumes_per_node (a call
 * failed with RESOURCE_EXHAUSTED); a new value is written to CSINode. */
void drivers_refresh_attach_limit(VolumeManager *m, const char *driver);
/* Whether setting up "av" (not on the node yet) would exceed its driver's
 * attach limit, with the Event's message why. */
bool drivers_attach_limit_reached(VolumeManager *m, const ActualVolume *av, char *message, size_t size);
/* An operation of "av" ended: the volumes its driver's attach limit held are
 * planned again in the next pass (there may be room now). */
void drivers_volume_changed(VolumeManager *m, const ActualVolume *av);

/* expand.c: NodeExpandVolume for published volumes whose claims say the
 * controller grew them. */
int expand_setup(VolumeManager *m);
void expand_free(VolumeManager *m);
/* A pod was added or updated: the claims of its published volumes are read now. */
void expand_pod_changed(VolumeManager *m, const K8sPod *pod);
/* A file system PV was published for a pod: its claim is read now. */
void expand_volume_published(VolumeManager *m);
/* kubelet's expandVolumeDuringMount: after the first NodePublishVolume of a
 * persistent file system volume for a pod, and before that publish counts as
 * done, its claim and PV are read and, when the claim asks for it, the file
 * system is grown inside the new target, so that the pod's containers see
 * the new size from their start.  0: nothing to do ("done" is not called);
 * 1: started, "done" is called once, never from inside; -errno.  "done" gets
 * 0 when the publish may count as done (grown, nothing to grow, or a final
 * error reported on the claim: the mount is not held back for it), or -errno
 * and a message when it must be tried again. */
typedef void (*expand_mount_done_t)(Operation *op, int error, const char *message);
int expand_during_publish(Operation *op, expand_mount_done_t done);

/* actual.c */
ActualVolume *actual_volume_new_empty(const VolumeKind *kind, VolumeLifecycle lifecycle, const char *unique_name, const char *driver,
                                      const char *handle, const char *spec_name);
ActualVolume *actual_volume_new(const VolumeSpec *spec);
ActualVolume *actual_volume_free(ActualVolume *av);
int actual_publish_set(ActualVolume *av, const PodInfo *pod, const char *spec_name, const char *target,
                       PublishState state);
void actual_publish_remove(ActualVolume *av, const char *pod_uid);
/* Every change of a field VolumeCounts counts goes through these. */
void actual_publish_set_state(ActualVolume *av, ActualPublish *p, PublishState state);
void actual_publish_set_mount_pending(ActualVolume *av, ActualPublish *p, bool pending);
void actual_volume_set_stage(ActualVolume *av, StageState stage);
void actual_volume_set_mount_pending(ActualVolume *av, bool pending);
void actual_volume_set_attach_wait(ActualVolume *av, uint64_t since);
void actual_volume_set_unresponsive(ActualVolume *av, uint64_t since);
/* The volume joins the counts (all it has is added), or leaves them. */
void actual_volume_count_in(ActualVolume *av, VolumeCounts *counts);
void actual_volume_count_out(ActualVolume *av);
Backoff *actual_backoff(ActualVolume *av, OpKind kind, const char *pod_uid, bool create);
void actual_backoff_forget(ActualVolume *av, OpKind kind, const char *pod_uid);
/* A failure of the operation (backoff_failed()), and every backoff of the
 * volume forgiven (backoff_reset()): through these, as a failing volume is
 * a failed pod volume (podstate.c). */
Backoff *actual_backoff_failed(ActualVolume *av, OpKind kind, const char *pod_uid, uint64_t now);
void actual_volume_reset_backoffs(ActualVolume *av);
/* Whether an operation of this kind (for this pod, for a publish or an
 * unpublish) may start now, given those in flight. */
bool actual_volume_op_allowed(const ActualVolume *av, OpKind kind, const char *pod_uid, bool one_call_per_volume);
/* Whether any operation of the volume is in flight, or one for this pod. */
bool actual_volume_busy(const ActualVolume *av);
bool actual_volume_pod_busy(const ActualVolume *av, const char *pod_uid);
/* Records an operation as in flight for its volume, and forgets it. */
int actual_volume_add_op(ActualVolume *av, Operation *op);
void actual_volume_remove_op(ActualVolume *av, Operation *op);
/* What its operations queue by in slices.c: a driver's volumes share the
 * driver's calls (CSI), a kind without drivers queues by its name. */
static inline const char *actual_volume_queue(const ActualVolume *av) {
        return av->driver ?: av->kind->name;
}
/* Frees every operation in flight (the manager is going away). */
void actual_volume_free_ops(ActualVolume *av);

int pod_info_from_desired(const DesiredPod *p, PodInfo *ret);
int pod_info_copy(const PodInfo *from, PodInfo *to);
void pod_info_done(PodInfo *p);

/* operations.c */
/* Creates the directories and metadata an operation needs before its CSI
 * call (not yet durable: the pass syncs once for all), then starts it. */
/* spec_name: the pod's name of the volume for publish and unpublish (the
 * publish path is built from it), NULL for stage and unstage. */
int operation_new(VolumeManager *m, OpKind kind, ActualVolume *av, const VolumeSpec *spec, const PodInfo *pod,
                  const char *spec_name, Operation **ret);
int operation_prepare(Operation *op);
/* The context= a stage or publish of "spec" passes for its pod, or NULL
 * (volume_spec_selinux_context() with this host, driver and configuration). */
const char *operation_selinux_context(VolumeManager *m, const VolumeSpec *spec);
/* Runs it; it ends through manager_operation_done(), possibly at once. */
void operation_start(Operation *op);
/* Removes what an operation's prepare made for a volume dir (the target if
 * it is no mount point, vol_data.json, the intent record and its empty
 * dirs, the dir and its empty parents); "target" and "dir" are relative to
 * root-dir. */
int volume_dirs_remove(VolumeManager *m, const LogFields *f, const char *dir, const char *target, bool staging);
/* Writes an intent record (path from path_intent_record(), its dirs made
 * as needed) stamped with this boot's ID; durable=false: the pass syncs once. */
int intent_write(VolumeManager *m, const char *path, Intent *i, bool durable);
/* Frees it, cancelling a CSI call in flight. */
Operation *operation_free(Operation *op);
/* How an operation held while root-dir was not kvolumed's goes on: its
 * next step, or its end with the outcome it had reached. */
typedef enum OpResume {
        OP_RESUME_RUN,
        OP_RESUME_SUCCEEDED,
        OP_RESUME_FAILED,
} OpResume;
void operation_resume(Operation *op, OpResume how);

/* ---- rootwatch.c: root-dir is the path, not the directory found there ----- */

/* Watches whether root-dir still names the directory "lock" locked: before
 * every pass, at every change of the mount namespace, and every few
 * seconds (a rename makes no mount event). */
int root_watch_new(VolumeManager *m, RootLock *lock);
void root_watch_free(VolumeManager *m);
/* Checks now; false while root-dir is not kvolumed's (m->root_lost: the
 * operator was told, once, and /healthz fails). */
bool root_watch_check(VolumeManager *m);
/* op reached its next step (or its end) while m->root_lost: it waits there,
 * doing nothing, and goes on with "how" once root-dir is kvolumed's again.
 * A stopping manager ends it at once instead. */
void root_watch_park(VolumeManager *m, Operation *op, OpResume how);
/* The manager stops: the waiting operations end without another step. */
void root_watch_stop(VolumeManager *m);

/* publishrefs.c: the publishes of the volume of driver and handle that
 * exist on disk under root-dir (kubelet's layout: vol_data.json of pod
 * volume dirs, block bind files, mapped publish files, pod device links),
 * whatever the in-memory state says.  Returns how many (0: none), the
 * first one's path relative to root-dir in *ret_first, or -errno. */
int publish_refs_find(VolumeManager *m, const char *driver, const char *handle, char **ret_first);
void publish_refs_free(VolumeManager *m);

/* tokens.c: the TokenRequests of a driver's CSIDriver.spec.tokenRequests.
 * csi/describe.c redacts this key of a request's volume_context. */
#define CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS "csi.storage.k8s.io/serviceAccount.tokens"
typedef void (*tokens_done_t)(Operation *op, int error, const char *message);
/* Requests a token per entry for the pod's service account, into
 * op->tokens: 0 when the driver asks for none (nothing started), 1 when
 * started (done is called once all answered, never from inside), -errno. */
int tokens_request(Operation *op, tokens_done_t done);
/* The value of csi.storage.k8s.io/serviceAccount.tokens, as kubelet
 * marshals it; a secret: free it with erase_and_free(). */
int tokens_format(const OpTokens *t, char **ret);
/* Overwrites and frees the tokens; their expiry times stay. */
void tokens_wipe(OpTokens *t);
OpTokens *tokens_free(OpTokens *t);
/* CLOCK_REALTIME when the first token is within 20 % (plus up to 5 % at
 * random) of its lifetime of expiring; UINT64_MAX without tokens. */
uint64_t tokens_refresh_due_realtime(const OpTokens *t, double random01);
int tokens_parse_rfc3339(const char *s, time_t *ret);
void erase_and_free(char *s);
static inline void erase_and_freep(char **p) {
        erase_and_free(*p);
}

/* describe.c: an operation ended; its failure (or a success that leaves
 * nothing failing) is what /volumes reports as the volume's last error. */
void describe_note_outcome(VolumeManager *m, const Operation *op, bool success);
/* state/podstate.c: the state kvolumed_volumes counts a pod's desired
 * volume in (exactly one), why, and the reason it is not published (NULL
 * when it is, or when it merely waits for work in progress): the one
 * judgement the metrics, STATUS=, /volumes, the local API and "kvolumed
 * status" show. */
typedef struct PodVolumeStatus {
        PodVolumeState state;
        PodVolumeFailure failure; /* when FAILED */
        const char *reason;       /* borrowed: why it is failed (or waits); NULL when published */
        /* The runner's final error: kubelet's WaitForAttachAndMount gives up
         * at once (a failure a retry alone does not fix). */
        bool final;
} PodVolumeStatus;
void describe_pod_volume(VolumeManager *m, const PodEntry *e, const DesiredVolume *dv, PodVolumeStatus *ret);
/* A publish that no desired volume of its pod accounts for: "tearing-down"
 * (the reconciler's own test before it unpublishes). */
bool describe_publish_tearing_down(VolumeManager *m, const ActualVolume *av, const ActualPublish *pub);
/* kvolumed_volumes{state}: every pod volume in exactly one state. */
void describe_count_states(VolumeManager *m, unsigned by_state[static _POD_VOLUME_STATE_MAX]);
/* kvolumed_volumes_failed's driver label for a spec (see volume_manager_count_failed):
 * its driver when describe_driver_named(), "other" when not, "" for none. */
const char *describe_driver_label(VolumeManager *m, const VolumeSpec *s);
/* Whether a driver may be a label: persistent (a PV's), registered here, or
 * a CSIDriver object's. */
bool describe_driver_named(VolumeManager *m, const char *driver, bool persistent);
/* describe.c: whether an operation of the volume failed and is to be
 * retried (a pod gone since its publish failed does not count). */
bool describe_volume_failing(VolumeManager *m, const ActualVolume *av);

/* podview.c: the watches of the pod runner's waiters.  Before a pass
 * forgets what is dirty, the watches of the pods it concerns are marked;
 * after it, they are called back. */
void podview_pass_begins(VolumeManager *m, bool full);
void podview_pass_done(VolumeManager *m);
void podview_detach_all(VolumeManager *m);
/* The reconciler plans a pod's volume afresh / reports a final error of it. */
void podview_volume_planned(PodEntry *e, const char *volume);
void podview_volume_failed(PodEntry *e, const char *volume);

/* republish.c: the schedule of requiresRepublish drivers. */
/* After a successful publish: when to publish again. */
void republish_schedule(VolumeManager *m, const Operation *op, ActualPublish *pub);
/* Whether a done publish is due for NodePublishVolume again now; if not,
 * lowers *next_wake to when it will be (when it has a schedule). */
bool republish_due(VolumeManager *m, const ActualVolume *av, ActualPublish *pub, uint64_t now,
                   uint64_t *next_wake);
/* Pure, for the tests: the next republish, "interval" from now less up to
 * "spread" of it (random01 of it), or sooner when the tokens are due
 * (CLOCK_REALTIME; UINT64_MAX: none). */
uint64_t republish_next(uint64_t now, uint64_t interval, double spread, uint64_t now_realtime,
                        uint64_t token_due_realtime, double random01);

/* ---- slices.c: recovery in slices ---------------------------------------- */

/* Operations one pass starts at most; the rest wait for the next pass,
 * which the loop runs after whatever else is due (a /healthz probe, a
 * watch event, a CSI answer). */
#define RECONCILE_SLICE 128u
/* ... and the time a pass may spend writing their records (directories,
 * vol_data.json, intents: a few file system calls each, which a slow or
 * busy root-dir file system makes milliseconds).  Past it, what is left is
 * held back for the next slice; RECONCILE_SLICE_MIN are always started.
 * Found by the fault storm: 128 operations' records held the loop for up
 * to 174 ms after an API outage. */
#define RECONCILE_PREPARE_BUDGET_USEC (20 * USEC_PER_MSEC)
#define RECONCILE_SLICE_MIN 4u

int slices_new(SliceQueue **ret);
SliceQueue *slices_free(SliceQueue *q);
/* Whether another operation of the driver may start in this pass. */
bool slices_room(VolumeManager *m, const char *driver, size_t started_in_pass);
void slices_started(VolumeManager *m, const char *driver);
void slices_finished(VolumeManager *m, const char *driver);
unsigned slices_pending(VolumeManager *m, const char *driver);
/* Remembers that an operation of the volume (for the pod, when it has an
 * entry) was due and not started. */
void slices_defer(VolumeManager *m, const char *unique_name, const char *pod_uid);
/* Moves up to a slice of what was held back to the dirty sets, oldest
 * first; returns how many. */
size_t slices_release(VolumeManager *m);
size_t slices_held(VolumeManager *m);

/* ---- wanters.c: the pods that want each persistent volume ----------------- */

void wanters_forget(VolumeManager *m, PodEntry *e);
void wanters_note(VolumeManager *m, PodEntry *e);
/* Pod UID → non-NULL; NULL when none. */
const Hashmap *wanters_of(VolumeManager *m, const char *unique_name);
void wanters_free_all(VolumeManager *m);

/* ---- counts.c: the status line's counts, kept in step (VolumeCounts) ------ */

int counts_init(VolumeCounts *c);
void counts_done(VolumeCounts *c);
/* A pod's desired volumes were set (noted) or are about to change or go
 * (forgotten): each note is paired with one forget. */
void counts_pod_noted(VolumeManager *m, PodEntry *e);
void counts_pod_forgotten(VolumeManager *m, PodEntry *e);
/* What a pod volume's state is judged from changed (the pod's reports, a
 * volume's publishes, stage or backoffs): judged again at the next read. */
void counts_pod_stale(VolumeCounts *c, const char *pod_uid);
void counts_volume_stale(VolumeCounts *c, const char *unique_name);
/* Fills ret's counted fields; "failing" is judged now, over the volumes
 * with a backoff only.  False: the counts were broken by a lack of memory,
 * ret is untouched and only a walk can tell. */
bool counts_get(VolumeManager *m, VolumeManagerStats *ret);
/* The tests' check (KVOLUMED_TEST_VERIFY_INCREMENTAL): the counts against a
 * walk of the node, a difference logged as "Incremental pass missed". */
void counts_verify(VolumeManager *m);
/* Every stale pod and volume judged again, so that each PodEntry's counted
 * fields are current.  False: the counts are broken, only a walk can tell. */
bool counts_settle(VolumeManager *m);
/* One pod's failed volumes and unready classes, judged now (what counts.c
 * keeps in the PodEntry's counted fields); *ret_failures is malloc'd, NULL
 * when none. */
int pod_volumes_judge(VolumeManager *m, const PodEntry *e, unsigned by_state[static _POD_VOLUME_STATE_MAX],
                      PodFailure **ret_failures, size_t *ret_n_failures, bool ret_unready[static 2]);
/* counts_verify()'s part for the metrics (podstate.c): failed{reason,driver}
 * and the oldest unready from the kept judgement against a walk. */
void podstate_verify_metrics(VolumeManager *m);

/* ---- plugins.c: the pod volumes and publishes by plugin ------------------- */

int plugin_counts_init(VolumeCounts *c);
void plugin_counts_done(VolumeCounts *c);
/* Paired as counts_pod_noted()/counts_pod_forgotten(), which call them. */
void plugin_counts_pod_noted(VolumeCounts *c, PodEntry *e);
void plugin_counts_pod_forgotten(VolumeCounts *c, PodEntry *e);
/* A publish of av enters (+1) or leaves (-1) the counts: counted while done. */
void plugin_counts_publish(VolumeCounts *c, const ActualVolume *av, const ActualPublish *p, int sign);
/* counts_verify()'s part for them: the tallies against the walks. */
void plugin_counts_verify(VolumeManager *m);

/* ---- podindex.c: the volumes each pod has on the node -------------------- */

int pod_index_new(PodIndex **ret);
PodIndex *pod_index_free(PodIndex *x);
/* After any change of av's publish or operation for the pod (actual.c):
 * the pod is listed with av exactly while av has either. */
void pod_index_sync(PodIndex *x, const ActualVolume *av, const char *pod_uid);
/* A volume enters or leaves the manager's maps, with whatever it has. */
void pod_index_add_volume(PodIndex *x, const ActualVolume *av);
void pod_index_remove_volume(PodIndex *x, const ActualVolume *av);
/* Out of memory once: pod_index_volumes() may miss some; walk instead. */
bool pod_index_broken(const PodIndex *x);
/* Unique name → non-NULL of the volumes that have a publish or an
 * operation of the pod; NULL: none. */
const Hashmap *pod_index_volumes(const PodIndex *x, const char *pod_uid);
/* For the tests' check: whether the index says what a walk over volumes
 * (unique name → ActualVolume) says. */
bool pod_index_agrees(const PodIndex *x, const Hashmap *volumes);

/* ---- mountwatch.c: what a change of the mount table concerns -------------- */

int mount_watch_new(MountWatch **ret);
MountWatch *mount_watch_free(MountWatch *w);
/* The mount table's callback (userdata: the manager). */
void mount_watch_changed(MountTable *t, const Hashmap *changed, void *userdata);
/* A volume enters or leaves the manager's maps (its staging is indexed). */
void mount_watch_add_volume(VolumeManager *m, const ActualVolume *av);
void mount_watch_remove_volume(VolumeManager *m, const ActualVolume *av);
/* A stage or publish of av succeeded (its mount_pending set): the mount
 * table is read again shortly (one read for a burst) to learn whether it
 * made a mount, and so whether it can be watched for the mount's loss. */
void mount_watch_settle_soon(VolumeManager *m, const ActualVolume *av);
/* av's unstage is held by other mounts: each read schedules a pass of it
 * while it stays so (the mounts that held it may be gone). */
void mount_watch_held(VolumeManager *m, const ActualVolume *av);

/* ---- wakes.c: when the reconciler must look at a volume again ------------- */

int wakes_new(Wakes **ret);
Wakes *wakes_free(Wakes *w);
/* The volume, and the pod when given, are due for a look at "when"; no
 * volume: volumesInUse is.  The earliest time of each is kept. */
void wakes_note(VolumeManager *m, const char *unique_name, const char *pod_uid, uint64_t when);
/* Forgets every wake (a full pass notes them all again); no longer broken. */
void wakes_clear(VolumeManager *m);
/* Moves the wakes due by now into the dirty sets (volumesInUse's: sets
 * in_use_dirty); returns how many. */
size_t wakes_release(VolumeManager *m, uint64_t now);
/* The earliest wake; UINT64_MAX: none. */
uint64_t wakes_next(VolumeManager *m);
/* Out of memory since the last full pass: a wake may be missing. */
bool wakes_broken(VolumeManager *m);

/* ---- rootsync.c: durability off the loop ---------------------------------- */

/* The operations of a batch, once what kvolumed changed below root-dir
 * before it is on disk (error: a sync failed, logged; they start anyway, as
 * before).  ops is the callee's to read, freed after. */
typedef void (*root_sync_done_t)(Operation **ops, size_t n, int error, void *userdata);
int root_sync_new(sd_event *event, RootDir *root, root_sync_done_t done, void *userdata, RootSync **ret);
RootSync *root_sync_free(RootSync *s);
/* Queues the operations for the next sync begun after this call: of every
 * file and directory changed (rootdir.h's notes) up to its start. */
int root_sync_submit(RootSync *s, Operation **ops, size_t n);
/* The intent log made durable now, off the loop, ahead of the next sync:
 * after a pass logged an operation's records ahead (root_dir_log_ahead),
 * while it writes their directories and files.  Once for each sync. */
void root_sync_kick(RootSync *s);
/* Operations waiting for a sync. */
size_t root_sync_waiting(RootSync *s);
/* reconciler.c: the done callback, starting the operations' CSI calls. */
void reconciler_synced(Operation **ops, size_t n, int error, void *userdata);

/* manager.c: the actual volumes' maps, m->volumes and m->persistent. */
int manager_add_volume(VolumeManager *m, ActualVolume *av);
void manager_remove_volume(VolumeManager *m, ActualVolume *av);
