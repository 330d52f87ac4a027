/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A kind of volume: what the volume manager needs to know of one kind (CSI,
 * and next configMap, secret, projected, downwardAPI, emptyDir, hostPath,
 * local) to want it, set it up, tear it down, find it again after a restart
 * and report it.  As systemd's UnitVTable drives its unit types and kubelet's
 * VolumePlugin/Mounter/Unmounter its plugins: each kind is a file (or a
 * folder) under volume/kinds/ exporting one const VolumeKind; the list of
 * kinds is volume/kinds/kinds.c and nothing else.  The manager, the
 * reconciler, reconstruction, the operation frame and the local API's views
 * call the entries of a volume's kind (VolumeSpec.kind, ActualVolume.kind)
 * and never ask which kind it is.
 *
 * The map of volume/:
 *   volume/manager.c      the manager: informers, pods, the pass schedule
 *   volume/podview.c,     what the local API and /volumes show
 *     describe.c
 *   volume/runtime.c      the runtime's word before any teardown
 *   volume/state/         desired (desired.c routes every pod volume
 *                         through the kinds), actual, intents, records,
 *                         backoffs, counts, the pod index, the lookup cache,
 *                         podstate.c (a pod volume's one state, for all views)
 *   volume/passes/        the reconciler, reconstruction, the operation
 *                         frame (operations.c: directories, the intent
 *                         record, durable sync, outcome, backoff, events)
 *   volume/kinds/         kinds.c (the list) and one folder or file per kind:
 *                         csi/ (stage/publish step machine, drivers,
 *                         attach waits, expansion, tokens, republish, raw block)
 *   volume/host/          root-dir, paths, the mount table, SELinux, fsGroup
 *
 * Adding a kind: one file volume/kinds/<kind>.c (or a folder) exporting
 * "const VolumeKind volume_kind_<kind>", one line in kinds.c, its sources
 * in volume/meson.build.  It must give name, plugin_name, pod_dir, claims
 * (or claims_pv) with desire (or desire_pv), paths, run and reconstruct_publish; every
 * other entry may be NULL and then means what its comment says.  An entry
 * is called only for volumes of its kind. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "k8s/objects.h"
#include "volume/state/intent.h"

typedef struct ActualPublish ActualPublish;
typedef struct ActualVolume ActualVolume;
typedef struct DesiredPod DesiredPod;
typedef struct ClusterView ClusterView;
typedef struct DesiredVolume DesiredVolume;
typedef struct Operation Operation;
typedef struct PassState PassState;
typedef struct PodEntry PodEntry;
typedef struct ReconstructScan ReconstructScan;
typedef struct VolumeManager VolumeManager;
typedef struct VolumeSpec VolumeSpec;
typedef struct cJSON cJSON;

/* VolumeKind.mount_attributes */
enum {
        /* Always mounted read-only into containers (configMap, secret,
         * downwardAPI, projected: Attributes.ReadOnly true), and still
         * managed: relabelled. */
        VOLUME_ATTR_READ_ONLY = 1 << 0,
        /* Not kubelet's to relabel (hostPath: Managed and SELinuxRelabel false). */
        VOLUME_ATTR_UNMANAGED = 1 << 1,
        /* Relabelled only on a host with SELinux, and not when mounted with
         * context= (CSI: GetSELinuxSupport of the mount). */
        VOLUME_ATTR_RELABEL_IF_SELINUX = 1 << 2,
};

typedef struct VolumeKind {
        /* "csi", "configmap", "secret", "projected", "downward-api",
         * "empty-dir", "host-path", "local": logs, and /volumes' "kind". */
        const char *name;
        /* kubelet's plugin name, "kubernetes.io/csi": the prefix of the
         * unique names ("<plugin>/<podUID>-<volume>" for a pod's own volume,
         * kubelet's GetUniqueVolumeNameFromSpecWithPod) and of the
         * storage_operation_duration_seconds plugin label. */
        const char *plugin_name;
        /* The escaped plugin name, "kubernetes.io~csi": a pod's volume of
         * this kind lives in pods/<uid>/volumes/<pod_dir>/<name>. */
        const char *pod_dir;
        /* What an operation of each OpKind is called in logs and messages
         * ("NodePublishVolume", "SetUp"); NULL: op_kind_to_string(). */
        const char *call_names[_OP_KIND_MAX];
        /* The volume has no directory under root-dir (hostPath: the runtime
         * is given the spec's host path): the frame makes none before a
         * setup; its intent record is kept all the same. */
        bool no_volume_dir;

        /* ---- the kind's node-wide services (volume/manager.c) ---- */

        /* When the manager is made (after its informers and timers), when
         * it starts (after its informers started), when it is freed: what
         * the kind keeps for the whole node (CSI: driver registration on
         * the Node and CSINode, online expansion).  NULL: nothing. */
        int (*setup)(VolumeManager *m);
        int (*start)(VolumeManager *m);
        void (*free)(VolumeManager *m);
        /* A pod of the node, or the Node, was added or updated (CSI: the
         * claims of its published volumes may have grown; the Node's
         * driver annotations).  NULL: nothing. */
        void (*pod_changed)(VolumeManager *m, const K8sPod *pod);
        void (*node_changed)(VolumeManager *m, const K8sNode *node);
        /* An operation of a volume of the kind ended, before it is freed
         * (CSI: its attach limit may have room; the scan of publishes on
         * disk is stale after an unpublish).  NULL: nothing. */
        void (*ended)(VolumeManager *m, const Operation *op);

        /* ---- the desired state (volume/state/desired.c) ---- */

        /* Whether the pod's volume source is of this kind (its source field
         * is set).  A persistentVolumeClaim or generic ephemeral source is
         * resolved by desired.c to its PV, whose source claims_pv judges.
         * NULL: never (a kind of PVs only, or of pod volumes only). */
        bool (*claims)(const K8sPodVolume *v);
        bool (*claims_pv)(const K8sPersistentVolume *pv);
        /* Fills dv: dv->spec (with spec->kind this kind), or dv->waiting, or
         * dv->failed.  "block": containers use it through volumeDevices.
         * 0, or -errno (out of memory: the pod is not built). */
        int (*desire)(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block, DesiredVolume *dv);
        /* The same for a bound claim's PV (claimRef and volumeMode checked). */
        int (*desire_pv)(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv, const ClusterView *view, bool block,
                         DesiredVolume *dv);
        /* The kind's own data in VolumeSpec.source: copied with the spec
         * (NULL result: out of memory) and freed with it.  NULL entries: the
         * kind keeps none (CSI's fields are VolumeSpec's own, from before
         * kinds). */
        void *(*source_copy)(const void *source);
        void (*source_free)(void *source);

        /* ---- where it lives under root-dir ---- */

        /* The volume dir (its metadata and intent record beside it) and the
         * target of a stage ("staging") or of the publish for pod_uid under
         * spec_name (the pod's name of the volume), relative to root-dir;
         * either ret may be NULL.  Kubelet's layout: a pod's volume is
         * pods/<uid>/volumes/<pod_dir>/<spec_name> (CSI's target is its
         * "mount" below).  "staging" is asked only of a kind with stages;
         * another answers -EOPNOTSUPP. */
        int (*paths)(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name,
                     char **ret_dir, char **ret_target);


        /* ---- planning (volume/passes/reconciler.c) ---- */

        /* Before the volume enters the actual state: a problem only a change
         * of the objects fixes (CSI: the CSIDriver's lifecycle modes); true
         * with the FailedMount message.  NULL: none. */
        bool (*refuses)(VolumeManager *m, const VolumeSpec *s, char *message, size_t size);
        /* A done publish: whether it is due for its operation again now
         * (CSI requiresRepublish, a token's expiry, a changed configMap);
         * if not, lowers *next_wake to when it will be.  NULL: never. */
        bool (*refresh_due)(VolumeManager *m, const ActualVolume *av, ActualPublish *pub, uint64_t now,
                            uint64_t *next_wake);
        /* Whether the kind's mounts of the volume take an SELinux context=
         * option (kubelet's SupportsSELinuxContextMount; CSI: the
         * CSIDriver's seLinuxMount); the pod's label, the access modes and
         * the configuration decide the rest (volume_spec_selinux_context()).
         * NULL: never. */
        bool (*selinux_mount)(VolumeManager *m, const VolumeSpec *s);
        /* Whether a stage or publish of the volume for the pod may start
         * now (CSI: its driver registered); else it reports why when it is
         * time to and wakes the pass with reconciler_wake().  NULL: always. */
        bool (*ready)(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
                      ActualVolume *av);
        /* The pod's operation of the volume is in flight: keep alive what
         * the kind's waits look up (CSI: the VolumeAttachment's cache entry).
         * NULL: nothing. */
        void (*busy)(VolumeManager *m, const VolumeSpec *s);
        /* Whether the volume has a node-wide stage before its publishes
         * (CSI: a persistent volume's globalmount).  NULL: never; the
         * reconciler plans no stage or unstage for it. */
        bool (*stages)(const VolumeSpec *s);
        /* Whether its stage may start now (CSI: the attach limit, the
         * VolumeAttachment); else it reports why.  NULL: always. */
        bool (*stage_ready)(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p,
                            const DesiredVolume *dv, ActualVolume *av);
        /* Whether what the volume's operations need is on the node now
         * (CSI: its driver registered): a teardown waits for it, and
         * teardown_waits says so (once).  NULL: always. */
        bool (*available)(VolumeManager *m, const ActualVolume *av);
        void (*teardown_waits)(ActualVolume *av);
        /* Why a pod's volume not published yet waits, for the runner and
         * /volumes, into buf (CSI: its driver's registration, its
         * attachment); false: for nothing of the kind's.  NULL: false. */
        bool (*waiting)(VolumeManager *m, const ActualVolume *av, const VolumeSpec *s, char *buf, size_t size);
        /* Whether the volume belongs in the Node's volumesInUse (CSI: an
         * attachable driver).  NULL: never. */
        bool (*attachable)(VolumeManager *m, const ActualVolume *av);

        /* ---- operations (volume/passes/operations.c, the frame) ---- */

        /* The kind's metadata file in the volume dir of a stage or publish
         * (CSI: vol_data.json): its path below root-dir, bytes and mode.  The
         * frame puts it in the intent log with the intent record, then
         * writes it once the volume dir is made.  A failure is logged and
         * fails the operation.  NULL: none. */
        int (*metadata)(Operation *op, const char *dir, char **ret_path, char **ret_text, mode_t *ret_mode);
        /* The operation's steps for op->kind (stage, publish, unpublish,
         * unstage), from op->step; it ends through operation_finish() or
         * operation_fail() (volume/passes/operation.h), possibly at once.
         * Called again for each step after operation_next(), and after
         * root-dir came back (op->step unchanged). */
        void (*run)(Operation *op);
        /* After the frame recorded the outcome in the actual state and
         * before the manager hears of it (CSI: the republish schedule, the
         * expansion check).  NULL: nothing. */
        void (*outcome)(Operation *op, bool success);

        /* ---- restart (volume/passes/reconstruct.c) ---- */

        /* pods/<uid>/volumes/<pod_dir>/<spec_name> found on disk: into the
         * actual state (or its leftovers removed). */
        void (*reconstruct_publish)(VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                                    const char *spec_name);
        /* The kind's node-wide directories, before every pod's (CSI: its
         * staging, which the publishes then name) and after (CSI: raw
         * block).  NULL: none. */
        void (*reconstruct_node)(VolumeManager *m, ReconstructScan *c);
        void (*reconstruct_node_after)(VolumeManager *m, ReconstructScan *c);

        /* ---- the runner's mounts (volume/podview.c, kubelet's makeMounts) ---- */

        /* What kubelet's Mounter.GetAttributes() says of the kind's volumes:
         * VOLUME_ATTR_* below, or 0: read-only as the volume's readOnly says,
         * managed (relabelled) unless read-only (emptyDir, local). */
        unsigned mount_attributes;
        /* The absolute host path the runtime is given for a set-up volume,
         * and where its subPaths are resolved (volume/passes/subpaths.c),
         * when it is not the kind's publish target under root-dir
         * (hostPath: the spec's path).  NULL: that target. */
        int (*runtime_host_path)(const VolumeSpec *s, char **ret);

        /* ---- reports (volume/describe.c) ---- */

        /* Kind-specific fields of a volume in /volumes.  NULL: none (CSI's
         * driver, handle, attach and stage fields are still describe.c's,
         * which gives them null for a volume without them). */
        int (*describe)(const ActualVolume *av, cJSON *into);
} VolumeKind;

/* ---- volume/kinds/kinds.c: the list ---- */

/* The kind a pod's own volume source is of (NULL: none; desired.c skips
 * it, as it did every non-CSI source before kinds). */
const VolumeKind *volume_kind_of_pod_volume(const K8sPodVolume *v);
/* The kind of a bound claim's PV (NULL: none, "not ours", skipped). */
const VolumeKind *volume_kind_of_pv(const K8sPersistentVolume *pv);
const VolumeKind *volume_kind_by_name(const char *name);
const VolumeKind *volume_kind_by_plugin_name(const char *plugin_name);
const VolumeKind *volume_kind_by_pod_dir(const char *pod_dir);
/* The kinds in order, NULL-terminated. */
const VolumeKind *const *volume_kinds(void);
/* Unit tests only: replace the list (NULL: the built-in one again). */
void volume_kinds_set_for_tests(const VolumeKind *const *kinds);
/* What an operation of the kind is called in logs. */
const char *volume_kind_call_name(const VolumeKind *k, OpKind op);

extern const VolumeKind volume_kind_csi;
extern const VolumeKind volume_kind_configmap;
extern const VolumeKind volume_kind_secret;
extern const VolumeKind volume_kind_empty_dir;
extern const VolumeKind volume_kind_host_path;
extern const VolumeKind volume_kind_local;
extern const VolumeKind volume_kind_downwardapi;
extern const VolumeKind volume_kind_projected;
