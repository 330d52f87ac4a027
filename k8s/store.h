/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* An informer's local cache: typed objects of one kind keyed by
 * "namespace/name" (or "name" for cluster-scoped kinds), plus the pure relist
 * logic that turns "old store + fresh list" into add/update/delete deltas. */

#include <stddef.h>

#include "k8s/objects.h"

typedef struct K8sStore K8sStore;

typedef enum K8sDeltaType {
        K8S_DELTA_ADD,
        K8S_DELTA_UPDATE,
        K8S_DELTA_DELETE,
} K8sDeltaType;

typedef struct K8sDelta {
        K8sDeltaType type;
        void *old; /* UPDATE, DELETE: owned by the delta array (no longer in the store) */
        void *new; /* ADD, UPDATE: owned by the store */
} K8sDelta;

int k8s_store_new(const K8sKind *kind, K8sStore **ret);
K8sStore *k8s_store_free(K8sStore *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sStore *, k8s_store_free);

size_t k8s_store_size(const K8sStore *s);
/* namespace is ignored for cluster-scoped kinds. */
void *k8s_store_get(const K8sStore *s, const char *namespace, const char *name);
/* Takes obj; the object it replaces (or NULL) goes to *ret_old, for the caller to free. */
int k8s_store_put(K8sStore *s, void *obj, void **ret_old);
/* Removes the object; it goes to *ret_old (NULL if there was none). */
void k8s_store_remove(K8sStore *s, const char *namespace, const char *name, void **ret_old);
/* Iteration: start with *cursor = 0; returns NULL at the end. Do not modify while iterating. */
void *k8s_store_next(const K8sStore *s, size_t *cursor);

/* Replaces the content with "items" (taken, and the array freed) and
 * reports what changed: an object with a new resourceVersion is UPDATE, one
 * whose UID changed under the same name is DELETE then ADD, one missing from
 * the list is DELETE; an unchanged one stays (the listed copy is dropped, so
 * handlers' pointers stay valid).  Adds and updates come first, in no
 * particular order, then deletes.
 *
 * "keep" (NULL-terminated keys from k8s_store_key(), may be NULL) names
 * objects that were listed but could not be decoded: they keep their last
 * good version and are not reported deleted — a pod whose object gained a
 * malformed field is still running, and its volumes must stay. */
int k8s_store_replace(K8sStore *s, void **items, size_t n_items, char *const *keep, K8sDelta **ret_deltas,
                      size_t *ret_n);

/* The store key of an object: "namespace/name", or "name" for cluster-scoped kinds. */
char *k8s_store_key(const K8sStore *s, const char *namespace, const char *name);
/* Frees the old objects the deltas own, and the array. */
void k8s_deltas_free(const K8sKind *kind, K8sDelta *deltas, size_t n);
