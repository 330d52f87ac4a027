/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Watches of single API objects by name (PVCs, PVs, VolumeAttachments),
 * started when a reconcile pass first looks one up and stopped when a pass
 * no longer does.  This keeps waiting event-driven (a claim bound late wakes
 * the reconciler at once) while watching only the objects this node's pods
 * use, rather than every claim of the cluster or a GET per retry. */

#include "k8s/informer.h"
#include "systemd/macro.h"

typedef struct ObjectWatches ObjectWatches;

/* Called after any watched object changed or was first listed. */
typedef void (*object_watches_changed_t)(void *userdata);

int object_watches_new(K8sClient *client, object_watches_changed_t changed, void *userdata, ObjectWatches **ret);
ObjectWatches *object_watches_free(ObjectWatches *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(ObjectWatches *, object_watches_free);

/* A pass begins: every watch is unmarked. */
void object_watches_begin(ObjectWatches *w);
/* Looks the object up, starting its watch when needed, and marks the watch
 * used.  0 with *ret the object (NULL: it does not exist), -EAGAIN while its
 * first list has not arrived, other -errno when the watch cannot start. */
int object_watches_get(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name,
                       const void **ret);
/* The pass is over: watches no lookup marked are stopped. */
void object_watches_sweep(ObjectWatches *w);

size_t object_watches_count(ObjectWatches *w);
