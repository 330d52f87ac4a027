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

/* A volume's state is volume/manager.h's PodVolumeState, with one
 * difference of meaning that the runner needs: here FAILED is a final error
 * only (kubelet's WaitForAttachAndMount gives up at once on it: a claim not
 * bound, a driver not registered after its grace, a lifecycle mode refused,
 * a CSI call that failed with a final code), while kvolumed_volumes{state}
 * and /volumes count a volume whose CSI call failed and will be retried as
 * failed too, to alert on.  Here such a volume is pending, with the error as
 * its reason. */

typedef struct PodVolumeView {
        char *name;   /* the pod's name of the volume (pod.spec.volumes[].name) */
        char *driver; /* NULL: not known yet (its claim is not bound) */
        PodVolumeState state;
        char *host_path; /* absolute: the publish target, or for block the pod device path */
        bool read_only;
        bool block;
        char *reason; /* why it is not published; NULL when published */
} PodVolumeView;

typedef struct PodView {
        char *uid;
        char *pod; /* namespace/name; NULL when only volumes on the node are known */
        PodVolumeView *volumes;
        size_t n_volumes;
        bool all_mounted;   /* every wanted volume published (none wanted: true) */
        bool all_torn_down; /* nothing of the pod published, uncertain or in flight on the node */
        bool failed;        /* a volume, or the pod as a whole, has a final error */
        char *reason;       /* why none of the pod's volumes is desired, when none is (NULL otherwise) */
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
