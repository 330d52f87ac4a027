/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The volume sources of a pod that kvolumed sets up itself (configMap,
 * secret, downwardAPI, projected, emptyDir, hostPath), the downward API
 * selectors that a container's env (for subPathExpr) shares with them, and
 * the names of the in-tree sources it does not set up.  Decoded by
 * k8s_pod_from_json() (k8s/objects.h) with the API server's defaults applied
 * (pkg/apis/core/v1/defaults.go): defaultMode 0644, expirationSeconds 3600,
 * fieldRef apiVersion "v1", hostPath type "".  The decoders refuse only what
 * has the wrong JSON type or cannot be read (a mode outside [0, 0777], a
 * quantity that does not parse, base64 that is not); the rules of API
 * validation on values and combinations (one source per volume, a known
 * hostPath type, subPath or subPathExpr, ...) are k8s_pod_volume_validate()'s
 * and k8s_volume_mount_validate()'s (k8s/objects.h), so that a pod the API
 * server let through in a newer shape is not dropped whole: the volume
 * manager reports the one volume it cannot set up.  Paths and keys are NOT
 * checked here: whoever writes files checks them (atomic writer rules). */

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "k8s/json.h"

#define K8S_DEFAULT_VOLUME_MODE 0644
#define K8S_DEFAULT_TOKEN_EXPIRATION_SECONDS 3600

/* items[] of a configMap or secret source: key → path, mode optional. */
typedef struct K8sKeyToPath {
        char *key;
        char *path;
        bool has_mode;
        int64_t mode; /* valid when has_mode; else the source's default mode */
} K8sKeyToPath;

/* A configMap or secret volume (name from "name" or "secretName"), and the
 * configMap / secret source of a projected volume (default_mode then 0: the
 * projected volume's defaultMode applies). */
typedef struct K8sKeyProjection {
        char *name; /* NULL allowed by the API for a volume; then nothing is found */
        K8sKeyToPath *items;
        size_t n_items; /* 0: every key, file named as the key */
        int64_t default_mode;
        bool optional; /* a missing object or key is not an error */
} K8sKeyProjection;

/* ObjectFieldSelector: "metadata.name", "metadata.labels['k']", ... */
typedef struct K8sFieldRef {
        char *field_path;
        char *api_version; /* "v1" unless set */
} K8sFieldRef;

/* ResourceFieldSelector: "limits.cpu", "requests.memory", ... */
typedef struct K8sResourceFieldRef {
        char *container_name; /* NULL: the container of the env (required in a volume) */
        char *resource;
        char *divisor; /* a quantity, "1" unless set; checked to parse; kubelet treats "0" as "1" */
} K8sResourceFieldRef;

typedef struct K8sDownwardAPIFile {
        char *path;
        K8sFieldRef *field_ref;                   /* one of these two */
        K8sResourceFieldRef *resource_field_ref;
        bool has_mode;
        int64_t mode;
} K8sDownwardAPIFile;

typedef struct K8sDownwardAPIProjection {
        K8sDownwardAPIFile *items;
        size_t n_items;
        int64_t default_mode; /* the volume's: 0644 unless set; 0 in a projection */
} K8sDownwardAPIProjection;

typedef struct K8sServiceAccountTokenProjection {
        char *audience; /* NULL: the API server's audience */
        int64_t expiration_seconds; /* 3600 unless set; valid: [600, 2^32] */
        char *path;
} K8sServiceAccountTokenProjection;

typedef struct K8sClusterTrustBundleProjection {
        char *name;        /* one bundle by name, or ... */
        char *signer_name; /* ... every bundle of the signer that matches: */
        /* labelSelector as a selector string ("a=b,c in (d,e),!f"), as
         * metav1.LabelSelectorAsSelector writes it.  has_label_selector
         * false: unset, matches nothing; true with "": matches everything. */
        bool has_label_selector;
        char *label_selector;
        bool label_selector_invalid; /* an operator or values it cannot express */
        bool optional;
        char *path;
} K8sClusterTrustBundleProjection;

/* One of projected.sources[]: exactly one member is set in a valid pod
 * (the decoder keeps all it finds).  other names a
 * source kvolumed does not know (e.g. "podCertificate") so that the volume
 * manager can say so instead of leaving the file out silently. */
typedef struct K8sVolumeProjection {
        K8sKeyProjection *config_map;
        K8sKeyProjection *secret;
        K8sDownwardAPIProjection *downward_api;
        K8sServiceAccountTokenProjection *service_account_token;
        K8sClusterTrustBundleProjection *cluster_trust_bundle;
        char *other;
} K8sVolumeProjection;

typedef struct K8sProjectedSource {
        K8sVolumeProjection *sources;
        size_t n_sources;
        int64_t default_mode; /* 0644 unless set */
} K8sProjectedSource;

typedef struct K8sEmptyDirSource {
        char *medium;           /* "" (node disk), "Memory", "HugePages", "HugePages-<size>" */
        char *size_limit;       /* the quantity as written; NULL: unset */
        int64_t size_limit_bytes; /* valid when size_limit is set */
} K8sEmptyDirSource;

typedef struct K8sHostPathSource {
        char *path;
        /* "" (no check, the API default), "DirectoryOrCreate", "Directory",
         * "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice". */
        char *type;
} K8sHostPathSource;

/* The in-tree cloud sources CSI migration serves through a CSI driver
 * (k8s/csimigration.h), of a PV's spec or a pod volume.  Rare, so one
 * pointer where they can be and nothing allocated without them. */
typedef enum K8sInTreeKind {
        K8S_IN_TREE_AWS_EBS,    /* awsElasticBlockStore */
        K8S_IN_TREE_GCE_PD,     /* gcePersistentDisk */
        K8S_IN_TREE_AZURE_DISK, /* azureDisk */
        K8S_IN_TREE_AZURE_FILE, /* azureFile */
        K8S_IN_TREE_CINDER,     /* cinder */
        K8S_IN_TREE_VSPHERE,    /* vsphereVolume */
        K8S_IN_TREE_PORTWORX,   /* portworxVolume */
        _K8S_IN_TREE_KIND_MAX,
} K8sInTreeKind;

/* Fields as the API names them; NULL: unset (the lib's "").  azureDisk gets
 * the API server's defaults (cachingMode "ReadWrite", kind "Shared", fsType
 * "ext4"), as every object read from a server has them. */
typedef struct K8sInTreeSource {
        K8sInTreeKind kind;
        /* awsElasticBlockStore.volumeID, gcePersistentDisk.pdName,
         * azureDisk.diskURI, azureFile.shareName, cinder.volumeID,
         * vsphereVolume.volumePath, portworxVolume.volumeID */
        char *volume_id;
        char *fs_type;
        bool read_only;
        int32_t partition;   /* awsElasticBlockStore, gcePersistentDisk; 0: none */
        char *disk_name;     /* azureDisk.diskName */
        char *caching_mode;  /* azureDisk.cachingMode */
        char *azure_kind;    /* azureDisk.kind: "Shared", "Dedicated", "Managed" */
        /* azureFile.secretName, cinder.secretRef.name */
        char *secret_name;
        /* azureFile.secretNamespace, cinder.secretRef.namespace: PVs only */
        char *secret_namespace;
        char *storage_policy_name; /* vsphereVolume.storagePolicyName */
        char *storage_policy_id;   /* vsphereVolume.storagePolicyID */
} K8sInTreeSource;

/* configMapKeyRef / secretKeyRef of an env entry. */
typedef struct K8sKeySelector {
        char *name;
        char *key;
        bool optional;
} K8sKeySelector;

/* A container's env entry: a value, or one valueFrom. */
typedef struct K8sEnvVar {
        char *name;
        char *value; /* NULL: unset ("" when valueFrom is absent too) */
        K8sFieldRef *field_ref;
        K8sResourceFieldRef *resource_field_ref;
        K8sKeySelector *config_map_key_ref;
        K8sKeySelector *secret_key_ref;
} K8sEnvVar;

/* An envFrom entry: every key of a ConfigMap or Secret as a variable
 * (prefixed), as kubelet's makeEnvironmentVariables reads them before env. */
typedef struct K8sEnvFromSource {
        char *prefix;          /* "" unless set */
        char *config_map_name; /* one of these two */
        char *secret_name;
        bool optional;
} K8sEnvFromSource;

/* Decoders used by k8s/objects.c; 0 or -EBADMSG naming the field, -ENOMEM. */
int k8s_key_projection_decode(JsonPath *p, const cJSON *o, const char *name_key, bool volume,
                              K8sKeyProjection **ret);
int k8s_downward_api_decode(JsonPath *p, const cJSON *o, bool volume, K8sDownwardAPIProjection **ret);
int k8s_projected_decode(JsonPath *p, const cJSON *o, K8sProjectedSource **ret);
int k8s_empty_dir_decode(JsonPath *p, const cJSON *o, K8sEmptyDirSource **ret);
int k8s_host_path_decode(JsonPath *p, const cJSON *o, K8sHostPathSource **ret);
int k8s_field_ref_decode(JsonPath *p, const cJSON *o, K8sFieldRef **ret);
int k8s_resource_field_ref_decode(JsonPath *p, const cJSON *o, K8sResourceFieldRef **ret);
int k8s_env_decode(JsonPath *p, const cJSON *container, K8sEnvVar **ret, size_t *ret_n);
int k8s_env_from_decode(JsonPath *p, const cJSON *container, K8sEnvFromSource **ret, size_t *ret_n);

/* The first in-tree cloud source of a pod volume or a PV spec ("spec" or
 * the volume on the path), *ret NULL when none. */
int k8s_in_tree_source_decode(JsonPath *p, const cJSON *source, bool pod_volume, K8sInTreeSource **ret);
K8sInTreeSource *k8s_in_tree_source_free(K8sInTreeSource *s);
/* "awsElasticBlockStore", ...: the source's JSON key. */
const char *k8s_in_tree_source_key(K8sInTreeKind kind);

void k8s_key_projection_free(K8sKeyProjection *k);
void k8s_downward_api_free(K8sDownwardAPIProjection *d);
void k8s_projected_free(K8sProjectedSource *s);
void k8s_empty_dir_free(K8sEmptyDirSource *e);
void k8s_host_path_free(K8sHostPathSource *h);
void k8s_field_ref_free(K8sFieldRef *f);
void k8s_resource_field_ref_free(K8sResourceFieldRef *r);
void k8s_env_free(K8sEnvVar *env, size_t n);
void k8s_env_from_free(K8sEnvFromSource *e, size_t n);

/* The first key of a pod volume (or PV spec) that names an in-tree source
 * kvolumed does not set up ("nfs", "iscsi", "gitRepo", "image", ...), or
 * NULL.  For a pod volume any other unknown key counts too (a newer API's
 * source); a PV spec has other fields, so only the known names count. */
const char *k8s_other_volume_source(const cJSON *source, bool pod_volume);
