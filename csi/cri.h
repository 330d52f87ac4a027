/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A client of the container runtime's CRI RuntimeService (containerd, CRI-O),
 * for one question only: which pods the runtime may still run — those with a
 * container created, running or in an unknown state, and those with a pod
 * sandbox that is not stopped (READY), in which the runner may start a
 * container again.  kvolumed asks it before it unpublishes a
 * pod's volume (DESIGN.md §3, the runtime rule).
 *
 * It sits in csi/ beside the CSI client because both are gRPC to a node-local
 * unix socket and share the transport (csi/grpc.c); it includes nothing of
 * k8s/.  One round is two calls whatever the number of pods: ListContainers
 * (all of them) and ListPodSandbox (all of them), grouped here. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "csi/csi.h"
#include "systemd/macro.h"

#define CRI_DEFAULT_TIMEOUT_USEC (10 * USEC_PER_SEC)

typedef struct CriClient CriClient;

/* The answer of one round.  On success code is CSI_CODE_OK, running_uids
 * the sorted pod UIDs (NULL-terminated, owned by the client, valid during the
 * callback only) of the pods with a container that is not known to have
 * exited, and ready_uids those of the pods with a sandbox that is not known
 * to be stopped (the two may overlap); otherwise both are NULL and
 * code/message say what failed (a missing socket is UNAVAILABLE). */
typedef struct CriAnswer {
        CsiCode code;
        const char *message;
        const char *method; /* the call that failed, or NULL */
        char *const *running_uids;
        char *const *ready_uids;
} CriAnswer;

typedef void (*cri_answer_t)(CriClient *c, const CriAnswer *answer, void *userdata);

/* endpoint: unix:///path. */
int cri_client_new(sd_event *event, const char *endpoint, uint64_t timeout_usec, CriClient **ret);
/* Cancels a round in flight (no callback). */
CriClient *cri_client_free(CriClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(CriClient *, cri_client_free);
const char *cri_client_endpoint(CriClient *c);

/* Starts a round; the callback comes from the loop, never from here.
 * -EBUSY while one is in flight. */
int cri_client_list_running_pods(CriClient *c, cri_answer_t done, void *userdata);
bool cri_client_busy(CriClient *c);

/* ---- the event stream (GetContainerEvents) -------------------------------- */

typedef enum CriEventType {
        CRI_EVENT_UNDECODABLE = -1, /* a message we could not read: anything may have changed */
        CRI_EVENT_CONTAINER_CREATED = 0,
        CRI_EVENT_CONTAINER_STARTED = 1,
        CRI_EVENT_CONTAINER_STOPPED = 2,
        CRI_EVENT_CONTAINER_DELETED = 3,
} CriEventType;

/* One event.  A sandbox's own events name the sandbox as the container
 * (containerd).  The strings are valid during the callback only; sandbox_id
 * and pod_uid are NULL when the runtime sent no sandbox status (it can, for
 * a sandbox already gone). */
typedef struct CriEvent {
        CriEventType type;
        const char *container_id;
        const char *sandbox_id;
        const char *pod_uid;
        int64_t created_at_nsec;
} CriEvent;

typedef void (*cri_event_t)(CriClient *c, const CriEvent *event, void *userdata);
/* The stream ended (never after cri_client_unsubscribe()): UNIMPLEMENTED
 * from a runtime that does not serve it (containerd before 1.7), OK when the
 * runtime closed it, any other code when it broke.  n_events: how many it
 * carried. */
typedef void (*cri_events_end_t)(CriClient *c, CsiCode code, const char *message, uint64_t n_events,
                                 void *userdata);

/* Opens the stream: -EBUSY when one is open.  Its connection is its own,
 * beside the unary calls'; it has no deadline and costs nothing while the
 * runtime has nothing to say. */
int cri_client_subscribe(CriClient *c, cri_event_t on_event, cri_events_end_t on_end, void *userdata);
/* Closes it; no callback. */
void cri_client_unsubscribe(CriClient *c);
bool cri_client_subscribed(CriClient *c);

/* ---- pure, for the unit tests --------------------------------------------- */

/* Decodes a packed ContainerEventResponse into *ret, whose strings point into
 * *ret_owner (to free with cri_event_owner_free()).  0, -EBADMSG or -ENOMEM. */
int cri_event_decode(const uint8_t *data, size_t size, CriEvent *ret, void **ret_owner);
void cri_event_owner_free(void *owner);

/* From packed ListContainersResponse and ListPodSandboxResponse messages:
 * in *ret_running the sorted, distinct UIDs of the pods with a container in
 * state CREATED, RUNNING or UNKNOWN (EXITED does not count); in *ret_ready
 * those of the pods with a sandbox in any state but NOTREADY (a crash-looping
 * container is EXITED between two attempts, and a pod whose image is being
 * pulled has no container yet: their sandbox is READY).  A container names
 * its sandbox by pod_sandbox_id, the sandbox its pod by metadata.uid (or its
 * io.kubernetes.pod.uid label); a container whose sandbox is not listed falls
 * back to its own io.kubernetes.pod.uid label.  0 and two NULL-terminated
 * arrays, or -EBADMSG / -ENOMEM. */
int cri_running_pods(const uint8_t *containers, size_t containers_size, const uint8_t *sandboxes,
                     size_t sandboxes_size, char ***ret_running, char ***ret_ready);
