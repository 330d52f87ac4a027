/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* CSI migration as kubelet does it: an in-tree cloud volume (a PV's
 * spec.awsElasticBlockStore, ..., or a pod's inline one) becomes the CSI PV
 * csi-translation-lib (staging/src/k8s.io/csi-translation-lib, 1.25) makes
 * of it, which then goes through everything a CSI volume does.  One file a
 * plugin in k8s/csimigration/, the common part (topology, the table of
 * plugins) in k8s/csimigration/common.c.
 *
 *   in-tree plugin                 source                 CSI driver
 *   kubernetes.io/aws-ebs          awsElasticBlockStore   ebs.csi.aws.com
 *   kubernetes.io/gce-pd           gcePersistentDisk      pd.csi.storage.gke.io
 *   kubernetes.io/azure-disk       azureDisk              disk.csi.azure.com
 *   kubernetes.io/azure-file       azureFile              file.csi.azure.com
 *   kubernetes.io/cinder           cinder                 cinder.csi.openstack.org
 *   kubernetes.io/vsphere-volume   vsphereVolume          csi.vsphere.vmware.com
 *   kubernetes.io/portworx-volume  portworxVolume         pxd.portworx.com
 *
 * Which are migrated: kubelet decides by feature gate
 * (pkg/volume/csimigration IsMigrationEnabledForPlugin).  The first six are
 * on: in the 1.25 tree EBS, GCE PD, Azure disk/file and cinder are on by
 * default or GA, vSphere's gate still off by default (it is GA from 1.26,
 * and kubelet-facts.md follows later releases).  Portworx is behind
 * CSIMigrationPortworx, off by default in 1.25: treated as off here (its
 * translation exists, for when it is on, but no volume is migrated to it
 * and the CSINode annotation does not list it). */

#include <stdbool.h>

#include "k8s/objects.h"

/* The translated PV (free with k8s_pv_free()): csi set (driver,
 * volume_handle, fs_type, read_only, volume_attributes, secret refs as the
 * lib sets them), in_tree NULL, node_affinity with the zone topology
 * translated to the driver's key (the PV's zone labels when it has no
 * affinity) as the lib does, and the rest copied (meta, labels, access
 * modes (GCE PD: backward-compatible ones), mount options, volume mode,
 * claimRef, capacity, phase, annotations kvolumed reads).
 * 0; -EOPNOTSUPP: no translatable in-tree source (portworx included: its
 * gate is off); -EINVAL with *ret_error (the lib's message) when the lib
 * refuses it; -ENOMEM. */
int k8s_csi_translate_pv(const K8sPersistentVolume *pv, K8sPersistentVolume **ret, char **ret_error);

/* The PV the lib makes of an inline volume (TranslateInTreeInlineVolumeToCSI
 * then VolumeMode Filesystem).  Its meta.name is the lib's, and kubelet's
 * spec name of the migrated volume (volume.Spec.Name() of the translated
 * spec is the PV's name): the pod's publish dir is
 * pods/<uid>/volumes/kubernetes.io~csi/<EscapeQualifiedName(name): "/" → "~">/mount,
 * and the unique volume name kubernetes.io/csi/<driver>^<handle>; the
 * staging dir, as for any CSI PV, is plugins/kubernetes.io/csi/<driver>/
 * <sha256(handle)>/globalmount.  Names:
 *   EBS "ebs.csi.aws.com-<vol-id>", GCE PD "pd.csi.storage.gke.io-<pdName>",
 *   cinder "cinder.csi.openstack.org-<id>", vSphere
 *   "csi.vsphere.vmware.com-<volumePath>", portworx "pxd.portworx.com-<id>",
 *   Azure disk "<diskURI>", Azure file "#<account>#<share>#<volume name>#<ns>"
 *   (also its handle).
 * No uid, no claimRef.  pod_namespace: Azure file's secret namespace
 * ("default" when NULL or "").  Same returns as k8s_csi_translate_pv();
 * kubelet words a failure "failed to translate in-tree pv to CSI: <error>"
 * (csimigration.TranslateInTreeSpecToCSI), for PVs and inline volumes. */
int k8s_csi_translate_inline(const K8sPodVolume *v, const char *pod_namespace, K8sPersistentVolume **ret,
                             char **ret_error);

/* "ebs.csi.aws.com" → "kubernetes.io/aws-ebs"; NULL: no in-tree plugin
 * migrates to that driver (or its migration is off: portworx). */
const char *k8s_csi_migration_plugin_of_driver(const char *driver);

/* The CSI driver a PV / pod volume is migrated to; NULL: not an in-tree
 * source that is migrated (none, nfs, ..., portworx with its gate off). */
const char *k8s_csi_migration_driver_of_pv(const K8sPersistentVolume *pv);
const char *k8s_csi_migration_driver_of_pod_volume(const K8sPodVolume *v);

/* The in-tree plugin name ("kubernetes.io/aws-ebs") of a PV / pod volume's
 * in-tree cloud source, for messages and metrics (kubelet labels its metrics
 * with the CSI plugin and migrated="true"); NULL: none.  Portworx is named
 * too ("kubernetes.io/portworx-volume"): a message can say it is not
 * migrated. */
const char *k8s_csi_migration_plugin_of_pv(const K8sPersistentVolume *pv);
const char *k8s_csi_migration_plugin_of_pod_volume(const K8sPodVolume *v);

/* Whether kubelet migrates the in-tree plugin (its feature gate, see above). */
bool k8s_csi_migration_plugin_on(const char *plugin);

/* The value of the CSINode annotation storage.alpha.kubernetes.io/migrated-plugins
 * for the drivers registered on this node (NULL-terminated; NULL: none): the
 * in-tree plugins migrated to one of them, sorted and joined with "," as
 * nodeinfomanager's setMigrationAnnotation writes them.  *ret NULL when
 * there is none: the key is then removed, never set to "".  (kubelet lists
 * every plugin whose gate is on whether or not its driver is registered;
 * kvolumed, which has no in-tree plugin to fall back on, lists those it can
 * serve: the attach/detach controller and the scheduler then treat the
 * others as not migrated on this node.)  0 or -ENOMEM. */
int k8s_csi_migrated_plugins_annotation(char *const *registered_drivers, char **ret);

#define K8S_MIGRATED_PLUGINS_ANNOTATION "storage.alpha.kubernetes.io/migrated-plugins"
