/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* List + watch of one kind of object, kept in a local store, with handlers
 * called for each change.  The list is paged (limit/continue); the watch
 * resumes from the last resourceVersion seen (bookmarks included) after a
 * dropped connection or its normal end; 410 Gone relists and delivers the
 * difference (objects that vanished meanwhile are reported deleted); errors
 * back off (800 ms doubling to 30 s, jittered; 429's Retry-After honoured).
 * Objects that do not decode are skipped with a log line naming the field. */

#include <stdint.h>

#include "k8s/client.h"
#include "k8s/objects.h"

typedef struct K8sInformer K8sInformer;

/* Objects passed to handlers belong to the informer: an added or updated one
 * stays valid until it is replaced or deleted; an "old" one only during the
 * call.  Handlers may free the informer (it is then freed after they return). */
typedef struct K8sInformerHandlers {
        void (*on_add)(K8sInformer *i, const void *obj, void *userdata);
        void (*on_update)(K8sInformer *i, const void *old, const void *new, void *userdata);
        void (*on_delete)(K8sInformer *i, const void *old, void *userdata);
        /* Once, after the first list has been delivered. */
        void (*on_synced)(K8sInformer *i, void *userdata);
        /* Every failed list or watch, with a message that names the server;
         * the informer retries by itself. */
        void (*on_error)(K8sInformer *i, int error, long status, const char *message, void *userdata);
} K8sInformerHandlers;

typedef struct K8sInformerOptions {
        const char *namespace;      /* NULL: all namespaces */
        const char *field_selector; /* e.g. "spec.nodeName=node-1" */
        const char *label_selector;
        unsigned page_size;             /* 0: 500 */
        uint64_t min_watch_timeout_usec; /* 0: 5 min; the timeout is random in [min, 2 min) */
        /* Objects the filter rejects (<0) are treated as absent, with a log
         * line naming *ret_field (e.g. an unsafe pod UID). */
        int (*filter)(const void *obj, const char **ret_field);
} K8sInformerOptions;

typedef struct K8sInformerStats {
        unsigned lists;   /* complete lists (pages not counted) */
        unsigned watches; /* watch requests started */
        unsigned relists_gone; /* lists caused by 410 Gone */
        unsigned errors;
        unsigned skipped; /* objects that did not decode or pass the filter */
} K8sInformerStats;

int k8s_informer_new(K8sClient *c, const K8sKind *kind, const K8sInformerOptions *options,
                     const K8sInformerHandlers *handlers, void *userdata, K8sInformer **ret);
/* Starts listing. */
int k8s_informer_start(K8sInformer *i);
/* Stops and frees; safe from the informer's own handlers. */
K8sInformer *k8s_informer_free(K8sInformer *i);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sInformer *, k8s_informer_free);

const K8sKind *k8s_informer_kind(K8sInformer *i);
/* True once the first list has been delivered; nothing may be decided
 * orphaned before every informer it depends on is synced. */
bool k8s_informer_synced(K8sInformer *i);
const char *k8s_informer_resource_version(K8sInformer *i);
size_t k8s_informer_size(K8sInformer *i);
const void *k8s_informer_get(K8sInformer *i, const char *namespace, const char *name);
/* Iteration over the store: *cursor = 0 first; NULL at the end. */
const void *k8s_informer_next(K8sInformer *i, size_t *cursor);
void k8s_informer_get_stats(K8sInformer *i, K8sInformerStats *ret);
void *k8s_informer_userdata(K8sInformer *i);

/* The informers kvolumed runs. */
int k8s_informer_new_pods_on_node(K8sClient *c, const char *node, const K8sInformerHandlers *h, void *userdata,
                                  K8sInformer **ret);
int k8s_informer_new_csidrivers(K8sClient *c, const K8sInformerHandlers *h, void *userdata, K8sInformer **ret);
int k8s_informer_new_node(K8sClient *c, const char *node, const K8sInformerHandlers *h, void *userdata,
                          K8sInformer **ret);
/* One VolumeAttachment by name, watched while a volume waits for it. */
int k8s_informer_new_volume_attachment(K8sClient *c, const char *name, const K8sInformerHandlers *h,
                                       void *userdata, K8sInformer **ret);

/* One object by name in a namespace (NULL for a cluster-scoped kind): list
 * and watch with fieldSelector=metadata.name=<name>, so that the store
 * holds that one object or nothing.  This is how kubelet's watch-based
 * configMap/secret manager follows the objects a pod's volumes name
 * (configMapAndSecretChangeDetectionStrategy: Watch), and the only list or
 * watch of configMaps and secrets the Node authorizer lets a node make; it
 * allows it only while a pod bound to the node names the object (403
 * "no relationship found" otherwise, reported through on_error and retried
 * with backoff, as for the graph's lag).  Like every informer it resumes
 * from the last resourceVersion after a dropped watch and relists on 410
 * Gone; on_add / on_update / on_delete report the object's creation,
 * changes and deletion; before on_synced, k8s_informer_get() is not an
 * answer.  A one-off read is k8s_get_object() (k8s/writers.h) with
 * k8s_kind_configmap or k8s_kind_secret.  -EINVAL for a name that is no
 * DNS-1123 subdomain or a namespace that is no DNS-1123 label. */
int k8s_informer_new_by_name(K8sClient *c, const K8sKind *kind, const char *namespace, const char *name,
                             const K8sInformerHandlers *h, void *userdata, K8sInformer **ret);
/* The same for a ConfigMap (objects are K8sConfigMap) and a Secret (K8sSecret). */
int k8s_informer_new_configmap(K8sClient *c, const char *namespace, const char *name, const K8sInformerHandlers *h,
                               void *userdata, K8sInformer **ret);
int k8s_informer_new_secret(K8sClient *c, const char *namespace, const char *name, const K8sInformerHandlers *h,
                            void *userdata, K8sInformer **ret);
