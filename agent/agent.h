/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The agent object: the only mutable state of the process.  It owns the
 * configuration and the event loop and wires the modules together. */

#include <systemd/sd-event.h>

#include "agent/http.h"
#include "agent/metrics.h"
#include "conf/config.h"
#include "csi/csi.h"
#include "k8s/client.h"
#include "systemd/macro.h"
#include "volume/manager.h"

typedef struct Agent {
        char *config_path;
        Config *config;
        sd_event *event;
        sd_event_source *sigterm_source, *sigint_source, *sighup_source;
        K8sClient *k8s;
        CsiClient *csi;
        VolumeManager *volumes;
        Metrics *metrics;
        HttpServer *http; /* NULL when [metrics] listen is empty */
        bool stopping;
} Agent;

/* Takes ownership of config.  Blocks the signals it handles, connects the
 * API client and the CSI client, creates the volume manager, and serves
 * /metrics, /healthz and /volumes when [metrics] listen is set. */
int agent_new(const char *config_path, Config *config, Agent **ret);
Agent *agent_free(Agent *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(Agent *, agent_free);

/* Runs until SIGTERM/SIGINT.  Returns 0 on a clean stop or -errno. */
int agent_run(Agent *a);

/* Re-reads the configuration file.  On error the running configuration stays
 * and the reason is logged; settings that need a restart are named. */
int agent_reload(Agent *a);
