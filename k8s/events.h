/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Kubernetes Events about pods (FailedMount, ...), recorded the way
 * client-go's event correlator does: a repeat of the same event (same
 * object, type, reason and message) within 10 minutes PATCHes the count and
 * lastTimestamp of the existing Event instead of creating one, and a token
 * bucket per source and object (burst 25, one more every 5 minutes) drops
 * the spam of a flapping object.  The decision logic is pure and runs on a
 * clock passed in, for the tests. */

#include <stdint.h>

#include "k8s/client.h"
#include "k8s/writers.h"

#define K8S_EVENT_AGGREGATE_WINDOW (10 * USEC_PER_MINUTE)
#define K8S_EVENT_SPAM_BURST 25
#define K8S_EVENT_SPAM_REFILL (5 * USEC_PER_MINUTE)
#define K8S_EVENT_CACHE_MAX 4096

typedef struct K8sObjectRef {
        const char *kind;        /* "Pod" */
        const char *api_version; /* "v1" */
        const char *namespace;
        const char *name;
        const char *uid;
        const char *resource_version;
} K8sObjectRef;

typedef enum K8sEventAction {
        K8S_EVENT_DROP,   /* rate limited */
        K8S_EVENT_CREATE, /* POST a new Event named decision.name */
        K8S_EVENT_PATCH,  /* PATCH Event decision.name with count and lastTimestamp */
} K8sEventAction;

typedef struct K8sEventDecision {
        K8sEventAction action;
        char name[300];
        unsigned count;
        uint64_t first_usec; /* CLOCK_REALTIME */
} K8sEventDecision;

typedef struct K8sEventCache K8sEventCache;

int k8s_event_cache_new(K8sEventCache **ret);
K8sEventCache *k8s_event_cache_free(K8sEventCache *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sEventCache *, k8s_event_cache_free);
/* Decides what to do with an event at now_usec (CLOCK_REALTIME). */
K8sEventAction k8s_event_cache_decide(K8sEventCache *c, const K8sObjectRef *obj, const char *type,
                                      const char *reason, const char *message, uint64_t now_usec,
                                      K8sEventDecision *ret);
/* The Event of that repeat is gone (PATCH got 404): the next one creates. */
void k8s_event_cache_forget(K8sEventCache *c, const char *name);

typedef struct K8sEventRecorder K8sEventRecorder;

/* component: source.component and reportingComponent ("kvolumed");
 * host: source.host and reportingInstance (the node name). */
int k8s_event_recorder_new(K8sClient *client, const char *component, const char *host, K8sEventRecorder **ret);
K8sEventRecorder *k8s_event_recorder_free(K8sEventRecorder *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sEventRecorder *, k8s_event_recorder_free);

/* type: "Normal" or "Warning".  Returns 0 when sent (done follows, may be
 * NULL), 1 when dropped by the spam filter (done is not called), or -errno. */
int k8s_event_record(K8sEventRecorder *r, const K8sObjectRef *obj, const char *type, const char *reason,
                     const char *message, k8s_write_done_t done, void *userdata);

/* RFC 3339 UTC with seconds, as the API writes metav1.Time. */
void k8s_format_time(uint64_t realtime_usec, char buf[static 32]);
