/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The runtime gate (DESIGN.md §3): before any volume of a pod is unpublished
 * (or its block device unmapped), the container runtime must have said,
 * recently and after the teardown was first wanted, that no container of the
 * pod is created, running or unknown, and that no sandbox of the pod is READY
 * (a runner starts a crash-looping container's next attempt, or the first one
 * after an image pull, in its READY sandbox; kubelet tears a pod's volumes
 * down only after killPod stopped the sandbox).  Until then the volume stays,
 * whatever the API says of the pod: a pod force-deleted while its containers
 * run, or may run again, keeps its volumes.  A runtime that does not answer holds every unpublish, as an
 * API server that does not answer holds every teardown.
 *
 * The runtime is asked only while some pod waits for teardown: a round (two
 * CRI calls for all the pods) when a pod starts waiting, then again when the
 * runtime's GetContainerEvents stream says a container or the sandbox of a
 * waiting pod stopped or went (the event says when, the lists say what),
 * with a 10 s re-check as the net for a dropped event.  Without the stream
 * (UNIMPLEMENTED: containerd 1.6; or broken, until it is subscribed to
 * again), again with a backoff (100 ms doubling to 1 s) while a waiting pod's
 * containers run or its sandbox is READY, or the runtime does not answer.  Never at rest.
 *
 * The stream is open for the gate's whole life, as kubelet's evented PLEG
 * keeps it (pkg/kubelet/pleg/evented.go), not only while pods wait: the
 * runtime sends nothing, not even headers, before its first event, so a
 * subscription opened when a pod starts waiting could never be known to be
 * in place before the stop it waits for; and containerd keeps up to 1000
 * undelivered events that a late subscriber would drain first.  An idle
 * stream costs no call and no wake-up.  Kubelet without evented PLEG (the
 * default) learns of a stop from PLEG's relist every second, whether
 * anything waits or not (pkg/kubelet/pleg/generic.go;
 * ShouldPodRuntimeBeRemoved in pod_workers.go gates the volume manager's
 * removal of the pod). */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "systemd/log.h"
#include "systemd/macro.h"

typedef struct RuntimeGate RuntimeGate;

/* An answer came: the pods waiting may go on (the reconciler's next pass). */
typedef void (*runtime_gate_wake_t)(void *userdata);

/* endpoint NULL or empty: no gate (*ret NULL); every check says yes. */
int runtime_gate_new(sd_event *event, const char *endpoint, runtime_gate_wake_t wake, void *userdata,
                     RuntimeGate **ret);
RuntimeGate *runtime_gate_free(RuntimeGate *g);
DEFINE_TRIVIAL_CLEANUP_FUNC(RuntimeGate *, runtime_gate_free);

/* Whether the pod's volume may be unpublished now: true with a fresh "no
 * container runs" answer; false otherwise, after starting or joining a
 * round.  f names the volume in the log line said once per wait. */
bool runtime_gate_allows(RuntimeGate *g, const char *pod_uid, const LogFields *f);

/* Why the pod's teardown waits for the runtime, for /volumes; NULL when it does not. */
const char *runtime_gate_reason(RuntimeGate *g, const char *pod_uid);

typedef struct RuntimeGateStats {
        bool configured;
        bool unreachable;   /* the last round failed */
        uint64_t errors;    /* rounds that failed */
        uint64_t rounds;    /* rounds that were started */
        unsigned waiting;   /* pods whose teardown waits for an answer or for their containers */
} RuntimeGateStats;
void runtime_gate_get_stats(RuntimeGate *g, RuntimeGateStats *ret);
