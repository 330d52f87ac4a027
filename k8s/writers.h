/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What kvolumed writes to the API, and the reads it does on demand.  Every
 * call is asynchronous: it returns at once (-errno only when it could not be
 * started) and reports through its callback, which is never called from
 * inside the call itself.  Read-modify-writes retry on 409 Conflict with a
 * fresh GET (at most K8S_WRITE_ATTEMPTS times). */

#include <stdint.h>

#include "k8s/client.h"
#include "k8s/objects.h"

#define K8S_WRITE_ATTEMPTS 5
#define K8S_ANNOTATION_NODE_ID "csi.volume.kubernetes.io/nodeid"
#define K8S_ANNOTATION_CONTROLLER_MANAGED "volumes.kubernetes.io/controller-managed-attach-detach"

/* error: 0, or -errno with message naming what failed (NULL on success). */
typedef void (*k8s_write_done_t)(K8sClient *c, int error, const char *message, void *userdata);

/* A typed object (free it with kind->free), or NULL with error/status set
 * (status 404: it does not exist). */
typedef void (*k8s_get_done_t)(K8sClient *c, int error, long status, const char *message, void *obj,
                               void *userdata);

/* GET one object.  PVCs and PVs are read this way, on demand, as kubelet
 * does, instead of watching every claim of the cluster. Secrets come back as
 * K8sSecret, wiped when freed. */
int k8s_get_object(K8sClient *c, const K8sKind *kind, const char *namespace, const char *name,
                   k8s_get_done_t done, void *userdata);

/* Merge-patches Node.status.volumesInUse to exactly "volumes" (NULL = empty). */
int k8s_node_patch_volumes_in_use(K8sClient *c, const char *node, char *const *volumes, k8s_write_done_t done,
                                  void *userdata);

/* Sets (node_id non-NULL) or removes the driver's entry in the annotation
 * csi.volume.kubernetes.io/nodeid (a JSON map driver → node ID), and makes
 * sure volumes.kubernetes.io/controller-managed-attach-detach is "true".
 * driver NULL: only the latter.  No PATCH when nothing changes. */
int k8s_node_set_driver_id(K8sClient *c, const char *node, const char *driver, const char *node_id,
                           k8s_write_done_t done, void *userdata);

/* Replaces or adds (node_id non-NULL) or removes the driver's entry of
 * CSINode <node>; creates the CSINode, owned by the Node, when missing.
 * topology_keys may be NULL; allocatable_count <= 0 means none. */
int k8s_csinode_set_driver(K8sClient *c, const char *node, const char *driver, const char *node_id,
                           char *const *topology_keys, int64_t allocatable_count, k8s_write_done_t done,
                           void *userdata);

/* Pure helpers, exposed for the tests. */
/* The nodeid annotation value after setting/removing driver; NULL result
 * (with 0) when the annotation should be removed.  Invalid JSON in the old
 * value is replaced. Returns 1 when the value changed. */
int k8s_node_id_annotation_update(const char *old, const char *driver, const char *node_id, char **ret);
/* Edits spec.drivers of a CSINode object in place; 1 when changed. */
int k8s_csinode_update_drivers(cJSON *csinode, const char *driver, const char *node_id, char *const *topology_keys,
                               int64_t allocatable_count);
