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

/* Same, and when node_uid is given, an existing CSINode whose Node owner
 * reference names another UID (the Node was deleted and created again) is
 * made to point at the Node with that UID, so that the garbage collector
 * keeps it. */
int k8s_csinode_set_driver_owned(K8sClient *c, const char *node, const char *node_uid, const char *driver,
                                 const char *node_id, char *const *topology_keys, int64_t allocatable_count,
                                 k8s_write_done_t done, void *userdata);

/* Adds the labels of "add" to Node <node> and removes each label of "remove"
 * whose value is still the one given there (NULL maps: nothing).  A label
 * of "add" the Node already has with another value fails the whole write
 * with -EEXIST and kubelet's message ("detected topology value collision:
 * ...").  Only labels NodeRestriction lets a node change on itself are
 * written: a key in the kubernetes.io or k8s.io namespaces outside
 * kubelet's own set is refused with -EPERM before any request, and logged.
 * GET, then a merge patch conditioned on the resourceVersion (409: read
 * again); no PATCH when nothing changes. */
int k8s_node_update_labels(K8sClient *c, const char *node, const K8sStringMap *add, const K8sStringMap *remove,
                           k8s_write_done_t done, void *userdata);

/* The answer to a TokenRequest: token and expiration (RFC 3339) belong to the
 * callee, which must wipe the token (explicit_bzero) before freeing it; both
 * NULL on failure, with error (-EACCES for 403) and message, which never
 * holds the token. */
typedef void (*k8s_token_done_t)(K8sClient *c, int error, const char *message, char *token, char *expiration,
                                 void *userdata);

/* POST /api/v1/namespaces/<namespace>/serviceaccounts/<sa>/token with the
 * audience ("" or NULL: the API server's), expirationSeconds (<= 0: the
 * server's default) and spec.boundObjectRef = the pod (apiVersion v1, kind
 * Pod, name, uid), as kubelet asks for a CSI driver's tokenRequests.  *ret
 * (optional) lets the caller cancel it. */
int k8s_request_token(K8sClient *c, const char *namespace, const char *service_account, const char *audience,
                      int64_t expiration_seconds, const char *pod_name, const char *pod_uid, k8s_token_done_t done,
                      void *userdata, K8sRequest **ret);

/* What a node reports of an online expansion in a PVC's status
 * (kubelet's resize_util.go; KEP-1790). */
typedef struct K8sPvcResizeUpdate {
        /* status.allocatedResourceStatuses.storage, e.g. "NodeResizeInProgress";
         * NULL removes the entry (and the map when it is left empty). */
        const char *resize_status;
        const char *capacity;      /* status.capacity.storage; NULL: unchanged */
        /* Adds a NodeResizeError condition "failed to expand pvc with <this>"
         * (an existing one is kept as it is); NULL: none. */
        const char *error;
        bool clear_resize_conditions; /* removes Resizing, FileSystemResizePending, *ResizeError */
} K8sPvcResizeUpdate;

/* GET the claim, then a merge patch of persistentvolumeclaims/<name>/status
 * conditioned on the resourceVersion read (409: read again), as kubelet's
 * PatchPVCStatus.  The Node authorizer lets a node patch the status of its
 * pods' claims only, and NodeRestriction only capacity, conditions and the
 * allocated resource fields of it: the patch holds nothing else. */
int k8s_pvc_patch_resize_status(K8sClient *c, const char *namespace, const char *name, const K8sPvcResizeUpdate *u,
                                k8s_write_done_t done, void *userdata);

/* Pure helpers, exposed for the tests. */
/* The merge patch that applies "u" to the claim "pvc" (its resourceVersion
 * included), with "now" (RFC 3339) as a new condition's lastTransitionTime. */
int k8s_pvc_resize_patch(const cJSON *pvc, const K8sPvcResizeUpdate *u, const char *now, cJSON **ret);
/* Whether NodeRestriction lets a node add, change or remove label "key" on
 * its own Node: keys outside the kubernetes.io and k8s.io namespaces (and
 * their subdomains), plus kubelet's own labels (kubernetes.io/hostname,
 * topology.kubernetes.io/zone, ..., anything under kubelet.kubernetes.io
 * and node.kubernetes.io).  Malformed keys are not allowed either. */
bool k8s_node_label_allowed(const char *key);
/* Whether kubelet maintains the label itself (its allowed set above). */
bool k8s_node_label_is_kubelet_label(const char *key);
/* A label key and value the API server accepts: [prefix/]name, prefix a
 * DNS-1123 subdomain, name and value ≤63 alphanumerics, '-', '_', '.' with
 * alphanumeric ends (the value may be empty).  0 or -EINVAL. */
int k8s_validate_label(const char *key, const char *value);
/* The merge patch {"metadata":{"labels":{...}}} that applies "add" and
 * "remove" to the Node object "node" (as above): 1 with *ret set, 0 when
 * nothing changes, -EEXIST with *ret_message (the collision), -EPERM or
 * -EINVAL with *ret_message for a refused key or value. */
int k8s_node_labels_patch(const cJSON *node, const K8sStringMap *add, const K8sStringMap *remove, cJSON **ret,
                          char **ret_message);
/* The nodeid annotation value after setting/removing driver; NULL result
 * (with 0) when the annotation should be removed.  Invalid JSON in the old
 * value is replaced. Returns 1 when the value changed. */
int k8s_node_id_annotation_update(const char *old, const char *driver, const char *node_id, char **ret);
/* Sets metadata.annotations storage.alpha.kubernetes.io/migrated-plugins of
 * a CSINode object for the drivers of its spec.drivers
 * (k8s_csi_migrated_plugins_annotation()), or removes the key when none;
 * the same set in another order is left.  1 when changed. */
int k8s_csinode_update_migrated_plugins(cJSON *csinode);
/* Edits spec.drivers of a CSINode object in place; 1 when changed. */
int k8s_csinode_update_drivers(cJSON *csinode, const char *driver, const char *node_id, char *const *topology_keys,
                               int64_t allocatable_count);
