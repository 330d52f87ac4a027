/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Why the agent is not ready, said every so often: a start that waits for
 * an API server that does not answer logs one line when it begins to fail
 * (the API client) and then, every WAITING_REPORT_INTERVAL_USEC, one line
 * and the STATUS= of what it waits for and since when ("Waiting for the
 * first pod list: API server https://... unreachable for 60 s"), never a
 * line per retry.  Once ready, STATUS= says when the API server is
 * unreachable (agent.c's status line asks waiting_api_text()). */

#include <stddef.h>
#include <systemd/sd-event.h>

#include "k8s/client.h"
#include "volume/manager.h"

#define WAITING_FIRST_REPORT_USEC (5 * USEC_PER_SEC)
#define WAITING_REPORT_INTERVAL_USEC (30 * USEC_PER_SEC)

typedef struct Waiting Waiting;

/* Called at each tick: whether the agent is ready (the reports stop then,
 * but the STATUS refresh goes on), and to refresh the STATUS line. */
typedef struct WaitingHooks {
        bool (*ready)(void *userdata);
        void (*refresh_status)(void *userdata);
        void *userdata;
} WaitingHooks;

int waiting_new(sd_event *event, K8sClient *k8s, VolumeManager *volumes, const WaitingHooks *hooks,
                Waiting **ret);
Waiting *waiting_free(Waiting *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(Waiting *, waiting_free);

/* "API server https://... unreachable for 60 s (<error>)", or NULL when it
 * answers; the text is the Waiting's, valid until the next call. */
const char *waiting_api_text(Waiting *w);
