/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The desired state of one pod: for each volume its containers use that a
 * kind claims (volume/kind.h), everything setting it up needs (a
 * VolumeSpec), or why it cannot proceed yet.
 * Built by a pure function from the pod and lookups of PVCs and PVs, so that
 * the population rules are tested without a cluster.  What depends on the
 * CSIDriver object (attachability, lifecycle modes, pod info) is decided when
 * an operation runs, because that object may appear or change at any time. */

#include <stdint.h>

#include "k8s/objects.h"
#include "systemd/macro.h"
#include "volume/kind.h"

typedef enum VolumeLifecycle {
        VOLUME_PERSISTENT,
        VOLUME_EPHEMERAL,
} VolumeLifecycle;

typedef struct VolumeSpec {
        const VolumeKind *kind; /* what sets it up; never NULL in a desired volume */
        void *source;        /* the kind's own data (kind->source_copy/source_free); NULL: none */
        VolumeLifecycle lifecycle;
        bool block;          /* volumeMode Block, used through volumeDevices */
        /* Its content follows objects looked up through the ClusterView (a
         * configMap, a secret): the pod is rebuilt on every full pass, as a
         * pod with claims is, which keeps those lookups and their watches. */
        bool follows_objects;
        char *spec_name;     /* the PV name, or the pod's volume name for inline volumes */
        char *driver;
        char *handle;        /* PV volumeHandle, or "csi-" + sha256(podUID + name) */
        char *unique_name;   /* kubernetes.io/csi/<driver>^<handle>, or kubernetes.io/csi/<podUID>-<name> */
        char *fs_type;       /* NULL: the driver's default */
        char **mount_flags;  /* PV mountOptions; NULL-terminated, may be NULL */
        char *access_mode;   /* PV accessModes[0] (ReadWriteOnce when absent); inline: ReadWriteOnce */
        char **access_modes; /* PV accessModes as they are (NULL: none); inline: NULL */
        bool read_only;      /* the pod's persistentVolumeClaim.readOnly, or inline csi.readOnly */
        K8sStringMap attributes;
        K8sSecretRef stage_secret;   /* namespace/name */
        K8sSecretRef publish_secret; /* inline: in the pod's namespace */
        /* SELinux (KEP-1710): the pod's file label and change policy, copied
         * here because whether a mount gets context= depends on the volume
         * too; see volume_spec_selinux_context(). */
        char *selinux_label;         /* NULL: the pod has none kvolumed can know */
        /* Another label some other container of the pod mounting the volume
         * has (NULL: they agree): the volume cannot be mounted with context=
         * for both (kubelet's "used with two different SELinux contexts"). */
        char *selinux_conflict;
        char *selinux_change_policy; /* the pod's seLinuxChangePolicy; NULL: unset */
        bool rwop;                   /* PV accessModes is exactly [ReadWriteOncePod] */
        /* The in-tree plugin ("kubernetes.io/aws-ebs", a static string of
         * k8s/csimigration.h) whose volume CSI migration translated into
         * this one, as kubelet's Spec.Migrated says: its metrics are labelled
         * migrated="true", its messages name the plugin.  NULL: not migrated. */
        const char *migrated_from;
} VolumeSpec;

typedef struct DesiredVolume {
        char *name;         /* pod.spec.volumes[].name */
        VolumeSpec *spec;   /* NULL while waiting or failed */
        char *waiting;      /* what it waits for (PVC not bound, PV missing, ...) */
        bool looking_up;    /* waiting only because a lookup has not answered yet */
        char *failed;       /* a problem only a change of the objects can fix */
        /* manager.c: why a volume that follows objects keeps what it resolved
         * before (its configMap or secret deleted: kubelet keeps the last
         * content); said once, while it lasts.  NULL: nothing kept. */
        char *kept;
        /* The PV's pv.beta.kubernetes.io/gid annotation as written
         * (kubelet's volumeGidValue); NULL: none or not a PV. */
        char *gid;
} DesiredVolume;

/* A volume some container uses whose source kvolumed does not set up and
 * the configuration leaves to the pod runner ([volumes] runner-kinds): not
 * desired here (nothing is set up, torn down or waited for), only listed for
 * the runner by the local API. */
typedef struct RunnerVolume {
        char *name; /* pod.spec.volumes[].name */
        char *type; /* the source's field name: "nfs", "image", ... */
} RunnerVolume;

typedef struct DesiredPod {
        char *uid;
        char *namespace;
        char *name;
        char *key;          /* "namespace/name", for logs and events */
        char *service_account;
        bool has_fs_group;
        int64_t fs_group;
        char *fs_group_change_policy; /* NULL: Always */
        DesiredVolume *volumes;
        size_t n_volumes;
        RunnerVolume *runner_volumes;
        size_t n_runner_volumes;
} DesiredPod;

/* Lookups of the objects a pod's volumes refer to: 0 with *ret the object,
 * or NULL when it does not exist; -EAGAIN when it is not known yet (its
 * first GET has not answered); -EACCES when the API server keeps refusing
 * it.  lookup_error (optional) gives the server's message for that refusal:
 * the volume waits with it, to be reported, since the Node authorizer may
 * still come to allow it (kubelet-facts §14). */
typedef struct ClusterView {
        int (*get_pvc)(void *userdata, const char *namespace, const char *name,
                       const K8sPersistentVolumeClaim **ret);
        int (*get_pv)(void *userdata, const char *name, const K8sPersistentVolume **ret);
        /* The configMaps and secrets of the pod's own volumes (configMap,
         * secret, projected sources), read and then followed by a watch of
         * that one object, as kubelet's watch-based managers and the Node
         * authorizer allow; the same answers as above.  NULL: not known to
         * this view (every such volume waits). */
        int (*get_configmap)(void *userdata, const char *namespace, const char *name, const K8sConfigMap **ret);
        int (*get_secret)(void *userdata, const char *namespace, const char *name, const K8sSecret **ret);
        /* This node's Node object (allocatable memory for a Memory emptyDir,
         * the downward API's node fields); NULL: not seen yet. */
        const K8sNode *(*get_node)(void *userdata);
        void *userdata;
        const char *(*lookup_error)(void *userdata, const K8sKind *kind, const char *namespace, const char *name);
        /* [volumes] runner-kinds (NULL-terminated; NULL: none): the sources
         * no kind claims that the runner sets up; any other such source is
         * a final error of the volume ("unsupported volume type"). */
        char *const *runner_kinds;
} ClusterView;

/* Whether the pod's volumes are wanted: while its status shows any
 * container running (app, init or ephemeral), whatever its phase or
 * deletion; otherwise unless it is Succeeded, Failed or deleted (kubelet
 * keeps the volumes of a terminating pod until its containers are gone). */
bool pod_volumes_wanted(const K8sPod *pod);

/* Builds the desired volumes of a pod; -EINVAL (with *ret_field) when a name
 * of the pod that becomes a path is malformed: then nothing of it may touch
 * the disk.  Only volumes some container mounts or maps are included, as
 * kubelet does.  Each is checked against API validation first
 * (k8s_pod_volume_validate, and k8s_volume_mount_validate for each of its
 * mounts): a volume the API would refuse fails with the rule it breaks.  A
 * source no kind claims (volume/kinds/kinds.c), and a claim's PV no kind
 * claims, fail as "unsupported volume type <type>" unless
 * view->runner_kinds names the type: then it is in p->runner_volumes. */
int desired_pod_build(const K8sPod *pod, const ClusterView *view, DesiredPod **ret, const char **ret_field);
DesiredPod *desired_pod_free(DesiredPod *p);
/* "nfs, image" ([volumes] runner-kinds, already checked) → a
 * NULL-terminated list; NULL or "" → NULL. */
int desired_parse_runner_kinds(const char *list, char ***ret);
DEFINE_TRIVIAL_CLEANUP_FUNC(DesiredPod *, desired_pod_free);

const DesiredVolume *desired_pod_find_volume(const DesiredPod *p, const char *name);

/* The SELinux file label of the pod, as kubelet's label translator makes it
 * with the container runtime's defaults: "<user>:object_r:container_file_t:<level>",
 * user "system_u" when unset; the pod's role and type are its process's and
 * do not enter the file label.  NULL without a level (the runtime picks a
 * random one that kubelet cannot know) or with characters no SELinux label
 * has (the label goes into a mount option). */
int desired_selinux_label(const K8sPod *pod, char **ret);

/* The SELinux file label of the volume "name" of the pod: the effective
 * seLinuxOptions (a container's own, else the pod's) of the containers that
 * mount it, as kubelet's GetPodVolumeNames and GetMountSELinuxLabel collect
 * them; containers with no options at all do not count.  *ret NULL: no label
 * kvolumed can know; *ret_conflict: another label of another container
 * (NULL: they agree). */
int desired_volume_selinux_label(const K8sPod *pod, const char *name, char **ret, char **ret_conflict);

/* The context= mount option value a stage or publish of the volume for this
 * pod passes (kubelet's GetMountSELinuxLabel and VolumeSupportsSELinuxMount),
 * or NULL: only on a host with SELinux, for a driver with seLinuxMount, a
 * persistent file system volume with exactly one access mode
 * (VolumeSupportsSELinuxMount), a pod with a label and without
 * seLinuxChangePolicy Recursive, and either a ReadWriteOncePod volume or,
 * with "mount_all" ([volumes] selinux-mount-all), a pod asking for
 * seLinuxChangePolicy MountOption. */
const char *volume_spec_selinux_context(const VolumeSpec *s, bool host_selinux, bool driver_selinux_mount,
                                        bool mount_all);

/* kubelet's supportsFSGroup (csi_mounter.go): whether kvolumed applies the
 * pod's fsGroup to the volume itself, for a driver without VOLUME_MOUNT_GROUP
 * and the CSIDriver's fsGroupPolicy (NULL: no CSIDriver, the default).  For
 * ReadWriteOnceWithFSType a PV needs an fsType and ReadWriteOnce anywhere in
 * its accessModes (none: no fsGroup), an inline volume only an fsType. */
bool volume_spec_fs_group_applies(const VolumeSpec *s, const char *fs_group_policy, bool has_fs_group);

VolumeSpec *volume_spec_copy(const VolumeSpec *s);
VolumeSpec *volume_spec_free(VolumeSpec *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(VolumeSpec *, volume_spec_free);

/* For the kinds' desire entries: a message into dv->waiting or dv->failed
 * (-ENOMEM or 0), and copies of the objects' fields (-ENOMEM or 0). */
int desired_set_text(char **field, const char *format, ...) _printf_(2, 3);
int desired_copy_string_map(const K8sStringMap *from, K8sStringMap *to);
int desired_copy_strv(char *const *from, char ***to);
/* name NULL or empty: *to stays empty. */
int desired_copy_secret_ref(const char *namespace, const char *name, K8sSecretRef *to);
