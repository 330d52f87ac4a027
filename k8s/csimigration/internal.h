/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Shared by the plugins of k8s/csimigration/; not for other modules. */

#include "k8s/csimigration.h"
#include "systemd/macro.h"

/* The zone/region node labels (k8s.io/api/core/v1 well_known_labels.go). */
#define LABEL_ZONE_GA "topology.kubernetes.io/zone"
#define LABEL_REGION_GA "topology.kubernetes.io/region"
#define LABEL_ZONE_BETA "failure-domain.beta.kubernetes.io/zone"
#define LABEL_REGION_BETA "failure-domain.beta.kubernetes.io/region"
/* const.go labelMultiZoneDelimiter: "z1__z2" in a zone label. */
#define LABEL_MULTI_ZONE_DELIMITER "__"

typedef struct MigrationPlugin {
        K8sInTreeKind kind;
        const char *plugin; /* "kubernetes.io/aws-ebs" */
        const char *driver; /* "ebs.csi.aws.com" */
        bool on;            /* kubelet's feature gate for it, by default */
        /* pv: a copy of the in-tree PV without its source; sets pv->csi and
         * translates topology and access modes as the plugin's
         * TranslateInTreePVToCSI.  s is the original's source. */
        int (*translate_pv)(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error);
        /* pv: an empty PV; sets meta.name, csi, access modes as the plugin's
         * TranslateInTreeInlineVolumeToCSI. */
        int (*translate_inline)(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                                K8sPersistentVolume *pv, char **ret_error);
} MigrationPlugin;

extern const MigrationPlugin migration_plugin_aws_ebs;
extern const MigrationPlugin migration_plugin_gce_pd;
extern const MigrationPlugin migration_plugin_azure_disk;
extern const MigrationPlugin migration_plugin_azure_file;
extern const MigrationPlugin migration_plugin_cinder;
extern const MigrationPlugin migration_plugin_vsphere;
extern const MigrationPlugin migration_plugin_portworx;

/* -EINVAL with *ret_error formatted (the lib's message), -ENOMEM. */

/* pv->csi, new, with driver and handle, read_only and fs_type (NULL or ""
 * both: unset) and no attribute. */
int migration_csi_new(K8sPersistentVolume *pv, const char *driver, const char *handle, bool read_only,
                      const char *fs_type);
/* Sets (or replaces) one entry of a string map. */
int migration_map_set(K8sStringMap *m, const char *key, const char *value);
/* pv->access_modes = { mode }. */
int migration_access_modes_set(K8sPersistentVolume *pv, const char *mode);
int migration_name_set(K8sPersistentVolume *pv, const char *fmt, ...) _printf_(2, 3);

/* Go's strings.Split(s, sep): "" gives { "" }. */
int migration_split(const char *s, const char *sep, char ***ret);

/* in_tree_volume.go's topology helpers, on pv in place. */
void migration_topology_label(const K8sPersistentVolume *pv, const char **ret_zone, const char **ret_region);
int migration_topology_values(const K8sPersistentVolume *pv, const char *key, char ***ret);
int migration_topology_replace(K8sPersistentVolume *pv, const char *old_key, const char *new_key);
/* -EINVAL: no valid zone (the lib's callers ignore it). */
int migration_topology_add(K8sPersistentVolume *pv, const char *key, char *const *zones);
/* translateTopologyFromInTreeToCSI */
int migration_topology_from_in_tree(K8sPersistentVolume *pv, const char *csi_key);
