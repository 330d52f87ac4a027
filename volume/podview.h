/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the pod runner asks of the volume manager (kubelet's
 * GetMountedVolumesForPod, WaitForAttachAndMount, WaitForUnmount): one pod's
 * volumes, each with its state, host path and why it is not published yet;
 * and watches on a pod, called back from the reconcile pass that concerned
 * it, so that a waiter is answered by the change itself, never by polling.
 * Built from memory only, as /volumes: no file system access, no request. */

#include <stdbool.h>

#include "systemd/macro.h"
#include "volume/manager.h"

/* A volume's state is volume/manager.h's PodVolumeState, judged as
 * kvolumed_volumes{state}, STATUS= and /volumes judge it (state/podstate.c): one
 * vocabulary everywhere.  What the runner needs beyond it, whether a failure
 * is final, is PodVolumeView.final. */

typedef struct PodVolumeView {
        char *name;   /* the pod's name of the volume (pod.spec.volumes[].name) */
        /* Its kind's name ("csi", "configmap", ...), "runner" for a source
         * left to the runner, NULL while its claim is not bound or when its
         * source is one kvolumed does not set up (then it is failed). */
        const char *kind;
        bool runner;       /* [volumes] runner-kinds: the runner sets it up; never in all_mounted */
        char *runner_type; /* then: its source ("nfs", "image") */
        char *driver; /* NULL: not known yet (its claim is not bound) */
        PodVolumeState state;
        /* FAILED with an error kubelet's WaitForAttachAndMount gives up on at
         * once (a claim not bound, a driver not registered after its grace,
         * a lifecycle mode refused, a CSI call failed with a final code): the
         * pod's wait=mounted is answered 409.  A failed volume that a retry
         * alone may fix (a CSI call that timed out, an attach not there yet)
         * is not final: the runner keeps waiting. */
        bool final;
        char *host_path; /* absolute: the publish target, or for block the pod device path */
        bool read_only;
        bool block;
        char *reason; /* why it is not published; NULL when published */
} PodVolumeView;

/* What the runner passes to CRI for a container, as kubelet's makeMounts and
 * makeBlockVolumes build it (runtime.v1 Mount and Device). */
typedef struct PodMountView {
        char *container_path;
        char *host_path;         /* the volume's, a subPath's bind; NULL for a runner's volume */
        bool readonly;           /* the volumeMount's, or the volume's (a kind always read-only) */
        bool selinux_relabel;    /* kubelet's rule: a managed volume whose kind relabels */
        const char *propagation; /* "PROPAGATION_PRIVATE", "PROPAGATION_HOST_TO_CONTAINER", "PROPAGATION_BIDIRECTIONAL" */
        bool recursive_read_only;
        char *volume;            /* runner mounts only: the pod's volume they need */
} PodMountView;

typedef struct PodDeviceView {
        char *container_path; /* devicePath */
        char *host_path;      /* pods/<uid>/volumeDevices/<plugin>/<name>, absolute */
        const char *permissions; /* "mrw", "r" for a read-only volume */
} PodDeviceView;

typedef struct PodContainerView {
        char *name;
        const char *type; /* "init", "app", "ephemeral" */
        PodMountView *mounts;
        size_t n_mounts;
        PodDeviceView *devices;
        size_t n_devices;
        PodMountView *runner_mounts; /* of volumes left to the runner: it fills host_path */
        size_t n_runner_mounts;
} PodContainerView;

typedef struct PodView {
        char *uid;
        char *pod; /* namespace/name; NULL when only volumes on the node are known */
        PodVolumeView *volumes;
        size_t n_volumes;
        bool all_mounted;   /* every wanted volume published (none wanted: true) */
        bool all_torn_down; /* nothing of the pod published, uncertain or in flight on the node */
        bool failed;        /* a volume, or the pod as a whole, has a final error */
        char *reason;       /* why none of the pod's volumes is desired, when none is; or what a
                             * subPath waits for (NULL otherwise) */
        /* Per container (init, app, ephemeral, in the pod's order): the
         * mounts and devices of its volumeMounts and volumeDevices whose
         * volume has a host path; complete only when all_mounted.  NULL when
         * the pod object is not known. */
        PodContainerView *containers;
        size_t n_containers;
        /* kubelet's GetExtraSupplementalGroupsForPod: the
         * pv.beta.kubernetes.io/gid of the pod's published PV volumes
         * (sorted as text, once each), those that parse as an int64 and
         * are not already in the pod's securityContext.supplementalGroups.
         * The runner adds them to the containers' groups. */
        int64_t *supplemental_groups;
        size_t n_supplemental_groups;
} PodView;

/* -ENOENT when the manager knows nothing of that pod: no pod object and
 * nothing of it on the node. */
int volume_manager_describe_pod(VolumeManager *m, const char *uid, PodView **ret);
PodView *pod_view_free(PodView *v);
DEFINE_TRIVIAL_CLEANUP_FUNC(PodView *, pod_view_free);

/* A watch on a pod UID (which need not be known yet): "changed" is called
 * at the end of each reconcile pass that looked at that pod (its object, its
 * volumes' operations, or a full pass), and may free the watch. */
typedef struct PodWatch PodWatch;
typedef void (*pod_watch_changed_t)(PodWatch *w, void *userdata);
int volume_manager_watch_pod(VolumeManager *m, const char *uid, pod_watch_changed_t changed, void *userdata,
                             PodWatch **ret);
PodWatch *pod_watch_free(PodWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(PodWatch *, pod_watch_free);
