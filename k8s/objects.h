/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The API objects kvolumed reads, decoded from JSON into plain structs that
 * hold only the fields it uses; no cJSON tree is kept.  Absent optional
 * fields get the API server's defaults.  Names are NOT validated here (the
 * fixtures of the API use names such as "nameValue"): whoever turns a name
 * into a path checks it first, see k8s_pod_validate_names(). */

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "k8s/json.h"
#include "k8s/objects-volumes.h"
#include "k8s/quantity.h"
#include "systemd/macro.h"

/* First member of every typed object, so generic code (store, informer) can
 * read any object through a K8sMeta pointer. */
typedef struct K8sMeta {
        char *uid;
        char *namespace; /* NULL for cluster-scoped objects */
        char *name;
        char *resource_version;
        char *deletion_timestamp; /* NULL unless being deleted */
        /* The ownerReference with controller: true, if any (a generic
         * ephemeral volume's claim must be controlled by its pod). */
        char *controller_kind;
        char *controller_uid;
} K8sMeta;

typedef struct K8sSecretRef {
        char *name; /* NULL: no reference */
        char *namespace;
} K8sSecretRef;

typedef struct K8sPodCsiSource {
        char *driver;
        bool read_only;
        char *fs_type; /* NULL: not set */
        K8sStringMap volume_attributes;
        char *node_publish_secret_name; /* in the pod's namespace */
} K8sPodCsiSource;

typedef struct K8sPodVolume {
        char *name;
        /* At most one source is set in a valid pod; the decoder does not
         * insist, and keeps each one it recognises. */
        K8sPodCsiSource *csi;  /* inline CSI volume */
        char *claim_name;      /* persistentVolumeClaim.claimName */
        bool claim_read_only;  /* persistentVolumeClaim.readOnly */
        bool ephemeral;        /* generic ephemeral: PVC "<pod>-<volume>" */
        /* The sources kvolumed sets up itself (k8s/objects-volumes.h). */
        K8sKeyProjection *config_map;     /* configMap (name from "name") */
        K8sKeyProjection *secret;         /* secret (name from "secretName") */
        K8sDownwardAPIProjection *downward_api;
        K8sProjectedSource *projected;
        K8sEmptyDirSource *empty_dir;
        K8sHostPathSource *host_path;
        /* An in-tree cloud source CSI migration serves (awsElasticBlockStore,
         * ...; k8s/csimigration.h); other_source is NULL then. */
        K8sInTreeSource *in_tree;
        /* A source kvolumed does not set up ("nfs", "gitRepo", "image", an
         * unknown key of a newer API, ...): the volume manager reports
         * "unsupported volume type <other_source>" instead of ignoring it. */
        char *other_source;
} K8sPodVolume;

typedef struct K8sVolumeMount {
        char *name;
        char *path; /* mountPath or devicePath */
        bool read_only;
        /* volumeMounts only (NULL for devices and when unset): */
        char *sub_path;
        char *sub_path_expr;     /* $(VAR) expanded from the container's env */
        char *mount_propagation; /* "None", "HostToContainer", "Bidirectional"; NULL: None */
        char *recursive_read_only; /* "Disabled", "IfPossible", "Enabled"; NULL: Disabled */
} K8sVolumeMount;

typedef struct K8sContainer {
        char *name;
        K8sVolumeMount *mounts; /* volumeMounts */
        size_t n_mounts;
        K8sVolumeMount *devices; /* volumeDevices */
        size_t n_devices;
        /* securityContext.seLinuxOptions: has_selinux when the object is
         * there (it replaces the pod's whole, as kubelet's
         * DetermineEffectiveSecurityContext has it). */
        bool has_selinux;
        char *selinux_user, *selinux_role, *selinux_type, *selinux_level;
        /* env and envFrom (subPathExpr expands $(VAR) from them, envFrom
         * first, as kubelet's makeEnvironmentVariables). */
        K8sEnvVar *env;
        size_t n_env;
        K8sEnvFromSource *env_from;
        size_t n_env_from;
        /* resources.limits / resources.requests: resource name → quantity
         * text ("memory", "cpu", "ephemeral-storage", ...); parse with
         * k8s/quantity.h. */
        K8sStringMap limits;
        K8sStringMap requests;
        /* securityContext: mountPropagation Bidirectional needs privileged. */
        bool privileged;
        bool has_run_as_user;
        int64_t run_as_user;
        bool has_run_as_group;
        int64_t run_as_group;
} K8sContainer;

typedef struct K8sContainerStatus {
        char *name;
        bool running;
        bool terminated;
        int64_t exit_code; /* valid when terminated */
} K8sContainerStatus;

typedef struct K8sPod {
        K8sMeta meta;
        char *node_name;
        char *phase; /* "Pending", "Running", "Succeeded", "Failed", "Unknown"; NULL if unset */
        char *service_account_name;
        bool has_fs_group;
        int64_t fs_group;
        char *fs_group_change_policy; /* NULL: not set (Always) */
        /* securityContext.seLinuxOptions (all NULL: not set) and
         * seLinuxChangePolicy (NULL: not set). */
        char *selinux_user, *selinux_role, *selinux_type, *selinux_level;
        char *selinux_change_policy;
        /* securityContext.runAsUser / runAsGroup / supplementalGroups (the
         * mode and owner of a projected token file depend on them). */
        bool has_run_as_user;
        int64_t run_as_user;
        bool has_run_as_group;
        int64_t run_as_group;
        int64_t *supplemental_groups;
        size_t n_supplemental_groups;
        K8sStringMap labels;      /* metadata.labels */
        K8sStringMap annotations; /* metadata.annotations */
        char *pod_ip;   /* status.podIP; NULL: not yet */
        char **pod_ips; /* status.podIPs[].ip; NULL: none */
        char *host_ip;  /* status.hostIP; NULL: not yet */
        char **host_ips; /* status.hostIPs[].ip; NULL: none */
        K8sPodVolume *volumes;
        size_t n_volumes;
        K8sContainer *containers;
        size_t n_containers;
        K8sContainer *init_containers;
        size_t n_init_containers;
        K8sContainer *ephemeral_containers; /* kubectl debug's; they may mount the pod's volumes */
        size_t n_ephemeral_containers;
        K8sContainerStatus *container_statuses;
        size_t n_container_statuses;
        K8sContainerStatus *init_container_statuses;
        size_t n_init_container_statuses;
        K8sContainerStatus *ephemeral_container_statuses;
        size_t n_ephemeral_container_statuses;
} K8sPod;

typedef struct K8sPersistentVolumeClaim {
        K8sMeta meta;
        char *volume_name; /* NULL: not bound */
        char *phase;
        char **access_modes; /* spec.accessModes */
        char *volume_mode;   /* defaults to "Filesystem" */
        char *capacity;      /* status.capacity.storage, a quantity; NULL: unset */
        /* status.allocatedResourceStatuses.storage (KEP-1790): "NodeResizePending",
         * "NodeResizeInProgress", ...; NULL: unset */
        char *resize_status;
} K8sPersistentVolumeClaim;

typedef struct K8sPvCsiSource {
        char *driver;
        char *volume_handle;
        bool read_only;
        char *fs_type;
        K8sStringMap volume_attributes;
        K8sSecretRef controller_publish_secret;
        K8sSecretRef node_stage_secret;
        K8sSecretRef node_publish_secret;
        K8sSecretRef node_expand_secret;
        K8sSecretRef controller_expand_secret;
} K8sPvCsiSource;

/* A node selector requirement: operator "In", "NotIn", "Exists",
 * "DoesNotExist", "Gt", "Lt". */
typedef struct K8sNodeSelectorRequirement {
        char *key;
        char *operator;
        char **values; /* NULL: none */
} K8sNodeSelectorRequirement;

/* A term matches when all its requirements do. */
typedef struct K8sNodeSelectorTerm {
        K8sNodeSelectorRequirement *match_expressions; /* on labels */
        size_t n_match_expressions;
        K8sNodeSelectorRequirement *match_fields; /* on fields: only "metadata.name" */
        size_t n_match_fields;
} K8sNodeSelectorTerm;

typedef struct K8sPersistentVolume {
        K8sMeta meta;
        K8sPvCsiSource *csi; /* NULL: not a CSI volume */
        char *volume_mode;   /* defaults to "Filesystem" */
        char **mount_options;
        char **access_modes;
        bool has_claim_ref;    /* spec.claimRef is set (the uid may not be yet) */
        char *claim_namespace; /* spec.claimRef */
        char *claim_name;
        char *claim_uid;
        char *phase;
        char *capacity;        /* spec.capacity.storage, a quantity; NULL: unset */
        K8sHostPathSource *host_path; /* spec.hostPath {path, type ("" unless set)} */
        char *local_path;             /* spec.local.path; NULL: not a local PV */
        char *local_fs_type;          /* spec.local.fsType; NULL: unset */
        /* spec.nodeAffinity.required.nodeSelectorTerms (ORed); n 0: none. */
        K8sNodeSelectorTerm *node_affinity;
        size_t n_node_affinity;
        /* An in-tree cloud source CSI migration serves (k8s/csimigration.h);
         * other_source is NULL then. */
        K8sInTreeSource *in_tree;
        /* An in-tree source kvolumed does not set up ("nfs", "iscsi", ...),
         * for "unsupported volume type" messages; NULL: none. */
        char *other_source;
        K8sStringMap labels; /* metadata.labels (the zone labels migration reads) */
        /* metadata.annotations kvolumed reads (NULL: absent):
         * pv.beta.kubernetes.io/gid, kubernetes.io/azure-file-resource-group */
        char *gid_annotation;
        char *azure_file_resource_group;
} K8sPersistentVolume;

typedef struct K8sTokenRequest {
        char *audience; /* "" allowed: the API server's audience */
        bool has_expiration_seconds;
        int64_t expiration_seconds;
} K8sTokenRequest;

/* Defaults from kubelet-facts.md §4 when a field is absent. */
typedef struct K8sCSIDriver {
        K8sMeta meta;
        bool attach_required;          /* true */
        bool pod_info_on_mount;        /* false */
        char **volume_lifecycle_modes; /* ["Persistent"] */
        bool storage_capacity;         /* false */
        char *fs_group_policy;         /* "ReadWriteOnceWithFSType" */
        K8sTokenRequest *token_requests;
        size_t n_token_requests;
        bool requires_republish;       /* false */
        bool se_linux_mount;           /* false */
        bool has_node_allocatable_update_period_seconds;
        int64_t node_allocatable_update_period_seconds;
        bool service_account_token_in_secrets; /* false (unset) */
} K8sCSIDriver;

typedef struct K8sVolumeAttachment {
        K8sMeta meta;
        char *attacher;
        char *node_name;
        char *persistent_volume_name;
        bool attached;
        K8sStringMap attachment_metadata;
        char *attach_error_message; /* NULL: no attach error */
        bool has_attach_error_code;
        int64_t attach_error_code;
} K8sVolumeAttachment;

typedef struct K8sAttachedVolume {
        char *name;        /* "kubernetes.io/csi/<driver>^<handle>" */
        char *device_path;
} K8sAttachedVolume;

typedef struct K8sNode {
        K8sMeta meta;
        K8sStringMap annotations;
        K8sStringMap labels;
        K8sAttachedVolume *volumes_attached;
        size_t n_volumes_attached;
        char **volumes_in_use;
        /* status.allocatable and status.capacity: resource name → quantity
         * text ("memory", "cpu", "ephemeral-storage", "hugepages-2Mi"). */
        K8sStringMap allocatable;
        K8sStringMap capacity;
} K8sNode;

typedef struct K8sSecretEntry {
        char *key;
        uint8_t *value; /* decoded bytes, NUL-terminated for convenience */
        size_t size;
} K8sSecretEntry;

/* Wiped when freed; keep only for the call that needs it. */
typedef struct K8sSecret {
        K8sMeta meta;
        char *type;
        K8sSecretEntry *data;
        size_t n_data;
        bool immutable;
} K8sSecret;

/* A ConfigMap: data is text, binaryData bytes (base64 decoded; the entry's
 * size counts them, NUL bytes included).  API validation keeps the keys of
 * the two apart. */
typedef struct K8sConfigMap {
        K8sMeta meta;
        K8sStringMap data;
        K8sSecretEntry *binary_data;
        size_t n_binary_data;
        bool immutable;
} K8sConfigMap;

/* What the store and informer need to know of a kind. */
typedef struct K8sKind {
        const char *kind;       /* "Pod" */
        const char *api_prefix; /* "/api/v1" or "/apis/storage.k8s.io/v1" */
        const char *plural;     /* "pods" */
        bool namespaced;
        int (*decode)(const cJSON *j, void **ret, K8sDecodeError *error);
        void (*free)(void *obj);
} K8sKind;

extern const K8sKind k8s_kind_pod;
extern const K8sKind k8s_kind_pvc;
extern const K8sKind k8s_kind_pv;
extern const K8sKind k8s_kind_csidriver;
extern const K8sKind k8s_kind_volume_attachment;
extern const K8sKind k8s_kind_node;
extern const K8sKind k8s_kind_secret;
extern const K8sKind k8s_kind_configmap;

/* Decoders: 0, -EBADMSG with *error naming the field, or -ENOMEM. */
int k8s_pod_from_json(const cJSON *j, K8sPod **ret, K8sDecodeError *error);
int k8s_pvc_from_json(const cJSON *j, K8sPersistentVolumeClaim **ret, K8sDecodeError *error);
int k8s_pv_from_json(const cJSON *j, K8sPersistentVolume **ret, K8sDecodeError *error);
int k8s_csidriver_from_json(const cJSON *j, K8sCSIDriver **ret, K8sDecodeError *error);
int k8s_volume_attachment_from_json(const cJSON *j, K8sVolumeAttachment **ret, K8sDecodeError *error);
int k8s_node_from_json(const cJSON *j, K8sNode **ret, K8sDecodeError *error);
int k8s_secret_from_json(const cJSON *j, K8sSecret **ret, K8sDecodeError *error);
int k8s_configmap_from_json(const cJSON *j, K8sConfigMap **ret, K8sDecodeError *error);

/* Parses JSON text and decodes it as "kind"; the error names "(json)" for
 * text that does not parse. */
int k8s_object_decode(const K8sKind *kind, const char *text, size_t size, void **ret, K8sDecodeError *error);

K8sPod *k8s_pod_free(K8sPod *p);
K8sPersistentVolumeClaim *k8s_pvc_free(K8sPersistentVolumeClaim *p);
K8sPersistentVolume *k8s_pv_free(K8sPersistentVolume *p);
K8sCSIDriver *k8s_csidriver_free(K8sCSIDriver *d);
K8sVolumeAttachment *k8s_volume_attachment_free(K8sVolumeAttachment *va);
K8sNode *k8s_node_free(K8sNode *n);
K8sSecret *k8s_secret_free(K8sSecret *s);
K8sConfigMap *k8s_configmap_free(K8sConfigMap *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sPod *, k8s_pod_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sPersistentVolumeClaim *, k8s_pvc_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sPersistentVolume *, k8s_pv_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sCSIDriver *, k8s_csidriver_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sVolumeAttachment *, k8s_volume_attachment_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sNode *, k8s_node_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sSecret *, k8s_secret_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sConfigMap *, k8s_configmap_free);

const K8sSecretEntry *k8s_secret_get(const K8sSecret *s, const char *key);
/* binaryData entry of a ConfigMap (data entries: k8s_string_map_get). */
const K8sSecretEntry *k8s_configmap_get_binary(const K8sConfigMap *c, const char *key);

/* The source of a pod volume as its JSON key ("csi", "persistentVolumeClaim",
 * "ephemeral", "configMap", "secret", "downwardAPI", "projected", "emptyDir",
 * "hostPath", or other_source), NULL when it has none kvolumed knows. */
const char *k8s_pod_volume_source(const K8sPodVolume *v);

/* Whether a PV's required node affinity lets it be used on "node" (its
 * labels, and metadata.name for matchFields), as
 * component-helpers' MatchNodeSelectorTerms: no terms match everything. */
bool k8s_pv_node_affinity_matches(const K8sPersistentVolume *pv, const K8sNode *node);

/* Checks the names of a pod that become path components or API paths:
 * UID UUID-shaped, namespace a DNS-1123 label, name a DNS-1123 subdomain,
 * every volume name a DNS-1123 label.  -EINVAL with *ret_field naming the
 * first bad one. */
int k8s_pod_validate_names(const K8sPod *p, const char **ret_field);


/* What API validation requires of a pod volume and a volumeMount, which the
 * decoders keep as written (k8s/objects-volumes.h): 0, or -EINVAL with
 * *ret_problem (static text, for a log line and an Event) naming the rule
 * broken, -EOPNOTSUPP for a source kvolumed does not set up (other_source,
 * or a projected source's "other": name it in the message), -EPERM for
 * Bidirectional propagation in a container that is not privileged (c may
 * be NULL: not privileged).  *ret_problem is NULL on success. */
int k8s_pod_volume_validate(const K8sPodVolume *v, const char **ret_problem);
int k8s_volume_mount_validate(const K8sVolumeMount *m, const K8sContainer *c, const char **ret_problem);

/* "namespace/name" or "name"; for log lines. */
const char *k8s_meta_describe(const K8sMeta *m, char *buf, size_t size);
