/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Why the agent is not ready, said every so often: a start that waits for
 * an API server that does not answer logs one line when it begins to fail
 * (the API client) and then, every WAITING_REPORT_INTERVAL_USEC, the
 * STATUS= of what it waits for and since when ("Waiting for the first pod
 * list: API server https://... unreachable for 60 s"), and the same line in
 * the journal at the first two reports, then at intervals doubling to
 * WAITING_LOG_MAX_USEC; never a line per retry.  Once ready, STATUS= says when the API server is
 * unreachable (agent.c's status line asks waiting_api_text()).  The time
 * is the outage's, from the first failed request, however often STATUS= is
 * rewritten meanwhile. */

#include <stddef.h>
#include <systemd/sd-event.h>

#include "k8s/client.h"
#include "volume/manager.h"

#define WAITING_FIRST_REPORT_USEC (5 * USEC_PER_SEC)
#define WAITING_REPORT_INTERVAL_USEC (30 * USEC_PER_SEC)
#define WAITING_LOG_MAX_USEC (10 * USEC_PER_MINUTE)

typedef struct Waiting Waiting;

/* Called at each tick: whether the agent has synced (the reports stop then,
 * but the STATUS refresh goes on; READY=1 may have been sent before, see
 * agent.c), and to refresh the STATUS line. */
typedef struct WaitingHooks {
        bool (*synced)(void *userdata);
        void (*refresh_status)(void *userdata);
        void *userdata;
} WaitingHooks;

int waiting_new(sd_event *event, K8sClient *k8s, VolumeManager *volumes, const WaitingHooks *hooks,
                Waiting **ret);
Waiting *waiting_free(Waiting *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(Waiting *, waiting_free);

/* Reports now what the agent waits for (STATUS=, and the journal when log),
 * as a tick does; once synced, refreshes the status line instead. */
void waiting_report(Waiting *w, bool log);

/* "API server https://... unreachable for 60 s (<error>)", or NULL when it
 * answers; the text is the Waiting's, valid until the next call. */
const char *waiting_api_text(Waiting *w);
