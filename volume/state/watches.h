/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A cache of single API objects read by GET (PVCs, PVs, VolumeAttachments),
 * one entry per object shared by every pod that needs it, kept while a
 * reconcile pass looks it up and dropped when a pass no longer does.
 *
 * A node may only GET these kinds, never list or watch them (the Node
 * authorizer, kubelet-facts §14), so nothing tells us when they change.  An
 * object not yet in its final state for a volume (a claim not bound, a PV or
 * claim that does not exist, a VolumeAttachment not attached) is fetched
 * again with a per-object exponential backoff (OBJECT_LOOKUP_RETRY_*), and
 * at once when object_watches_refresh() says an event the node can watch
 * (its pods, its Node) may have changed it; objects in their final state are
 * not fetched again.  Failed GETs (5xx, no connection, a 403 while
 * the authorizer's graph does not know a new pod yet) are retried the same
 * way.  The "changed" callback runs after the first answer for an object and
 * after every answer that differs from the cached one, with the askers of
 * that object: each lookup names who asked (an opaque string of the
 * caller's, say a pod or a volume), so that an answer costs a look at
 * those who wait for it, not a pass over the node (issue 23: every answer
 * was a full pass, three of them for each new pod of a claim). */

#include "k8s/client.h"
#include "k8s/objects.h"
#include "systemd/macro.h"

#define OBJECT_LOOKUP_RETRY_INITIAL_USEC (100 * USEC_PER_MSEC)
#define OBJECT_LOOKUP_RETRY_MAX_USEC (3200 * USEC_PER_MSEC)
/* A 403 is reported to the caller (-EACCES) once this many GETs in a row
 * were refused over at least this long: before that it is taken for the
 * authorizer's lag. */
#define OBJECT_LOOKUP_FORBIDDEN_ATTEMPTS 5
#define OBJECT_LOOKUP_FORBIDDEN_USEC (3 * USEC_PER_SEC)

typedef struct ObjectWatches ObjectWatches;

/* Called after any cached object changed or was first answered, and when a
 * lookup starts or stops being refused (-EACCES), with the askers that looked
 * it up since the last object_watches_begin() (the full pass that every
 * entry in use is looked up again by).  askers NULL: who asked is not known
 * (out of memory once, or a lookup without an asker): anyone may wait. */
typedef void (*object_watches_changed_t)(const char *const *askers, size_t n_askers, void *userdata);

int object_watches_new(K8sClient *client, object_watches_changed_t changed, void *userdata, ObjectWatches **ret);
ObjectWatches *object_watches_free(ObjectWatches *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(ObjectWatches *, object_watches_free);

/* A full pass begins: every entry is unmarked, and forgets its askers (the
 * pass asks again for what is still in use). */
void object_watches_begin(ObjectWatches *w);
/* Looks the object up in the cache, creating its entry (and starting its
 * first GET) when needed, and marks the entry used; asker (copied; NULL: none
 * known) is told of its changes until the next full pass.  0 with *ret the object
 * (NULL: it does not exist); -EAGAIN while its first answer has not arrived
 * (or only failures came so far); -EACCES while the API server keeps refusing
 * it (object_watches_error() says what the server said; the GETs go on at
 * the backoff's cap); -EINVAL for a name that cannot be asked for. */
int object_watches_get(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name,
                       const char *asker, const void **ret);
/* The last failure of the object's GETs (the API server's Status message for
 * a 403), or NULL when the last GET succeeded or the object is not cached. */
const char *object_watches_error(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name);
/* Something the node can watch says objects of this kind (NULL: every kind)
 * may have changed (a pod added or updated: its claim may just have been
 * bound; the Node's volumesAttached: a VolumeAttachment attached): every
 * cached entry of it not in its final state is fetched again soon, once per
 * event-loop iteration however many calls come, and once more after a GET
 * already in flight.  Entries in their final state are left alone: what
 * made them final does not change while a pod uses the object, and a burst
 * of pods on one claim must cost one GET. */
void object_watches_refresh(ObjectWatches *w, const K8sKind *kind);
/* The safety-net resync's slice (manager.c): every entry the asker looked
 * up, final or not, is fetched again soon.  What made an entry final may
 * still be undone by hand (a PV whose protection finalizer was removed,
 * deleted and re-created under the same name): the reconciler must hear of
 * it, if only to say it keeps what the running pod resolved.  An asker at a
 * time, the GETs of a round are spread over it as its slices are. */
void object_watches_refresh_asker(ObjectWatches *w, const char *asker);
/* The asker needs nothing any more (a pod deleted or gone from the node):
 * the entries only it looked up and not in their final state (a claim not
 * bound, not found, refused) are dropped at once, their GETs cancelled;
 * final ones stay until a full pass sweeps them (they cost no GET), except
 * a watched configMap or secret, whose watch stops at once.
 * Before, they lived until the next full pass's sweep, and a deleted pod's
 * claim, which the Node authorizer no longer lets the node read, was asked
 * for again and again: 403s, and after five a warning about a pod that is
 * gone (the storm's 403s after an API outage). */
void object_watches_forget_asker(ObjectWatches *w, const char *asker);
/* The pass is over: entries no lookup marked are dropped, their GETs cancelled. */
void object_watches_sweep(ObjectWatches *w);
/* A rolling resync's round (manager.c) begins: returns its epoch, for the
 * sweep at its end.  Askers are kept (the round's slices look up again
 * only the pods and volumes they take). */
uint64_t object_watches_round_begin(ObjectWatches *w);
/* The round is over: entries not looked up since its epoch (by a slice, a
 * scoped or a full pass) are dropped, as a full pass's sweep does; and
 * those no asker is known for are fetched again (their askers' slices could
 * not). */
void object_watches_round_sweep(ObjectWatches *w, uint64_t epoch);

/* ConfigMaps and secrets (k8s_kind_configmap, k8s_kind_secret): after the
 * first answer of a GET (the object, or 404), that one object is watched by
 * name (k8s_informer_new_configmap/_secret, fieldSelector metadata.name, as
 * kubelet's watch-based manager; never a list of the namespace).  Each event
 * of the watch GETs it again, so an update or a deletion reaches exactly its
 * askers; while watched, the entry is final (no polling).  The watch stops
 * when the entry goes (a sweep, or its last asker forgotten). */

size_t object_watches_count(ObjectWatches *w);
