/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* CSI's entries of volume/kind.h, between the files of volume/kinds/csi/;
 * everyone else reaches them through volume_kind_csi. */

#include "volume/kind.h"

/* drivers.c: the driver's CSIDriver object (NULL: none), from the
 * manager's informer; whether its volumes are attached (kubelet's
 * skipAttach inverted: no CSIDriver object means attachable). */
const K8sCSIDriver *csi_driver_object(VolumeManager *m, const char *driver);
bool csi_driver_attachable(VolumeManager *m, const char *driver);

/* VolumeSpec.source of a CSI volume, when it has one: what kubelet's spec
 * says that VolumeSpec's own fields do not. */
typedef struct CsiSource {
        /* kubelet's spec.Name() where the pod's volume dir is its escaped
         * form (a migrated inline volume's translated PV name with a "/"):
         * vol_data.json's specVolID. */
        char *spec_vol_id;
} CsiSource;

/* desire.c */
bool csi_claims(const K8sPodVolume *v);
bool csi_claims_pv(const K8sPersistentVolume *pv);
int csi_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block, DesiredVolume *dv);
void *csi_source_copy(const void *source);
void csi_source_free(void *source);
int csi_desire_pv(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv, const ClusterView *view, bool block,
                  DesiredVolume *dv);

/* plan.c */
bool csi_refuses(VolumeManager *m, const VolumeSpec *s, char *message, size_t size);
bool csi_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
               ActualVolume *av);
void csi_busy(VolumeManager *m, const VolumeSpec *s);
bool csi_selinux_mount(VolumeManager *m, const VolumeSpec *s);
bool csi_stages(const VolumeSpec *s);
bool csi_stage_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
                     ActualVolume *av);
bool csi_available(VolumeManager *m, const ActualVolume *av);
bool csi_waiting(VolumeManager *m, const ActualVolume *av, const VolumeSpec *s, char *buf, size_t size);
void csi_teardown_waits(ActualVolume *av);
bool csi_attachable(VolumeManager *m, const ActualVolume *av);

/* kind.c */
int csi_metadata(Operation *op, const char *dir, char **ret_path, char **ret_text, mode_t *ret_mode);
int csi_paths(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name, char **ret_dir,
              char **ret_target);

/* steps.c */
void csi_operation_run(Operation *op);
