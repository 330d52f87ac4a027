/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The agent object: the only mutable state of the process.  It owns the
 * configuration and the event loop and wires the modules together. */

#include <systemd/sd-event.h>

#include "agent/http.h"
#include "agent/localapi.h"
#include "agent/metrics.h"
#include "agent/waiting.h"
#include "conf/config.h"
#include "csi/csi.h"
#include "k8s/client.h"
#include "k8s/identity.h"
#include "systemd/macro.h"
#include "volume/host/rootlock.h"
#include "volume/manager.h"

typedef struct Agent {
        char *config_path;
        Config *config;
        RootLock *root_lock; /* borrowed: held by main() for the process's life */
        sd_event *event;
        sd_event_source *sigterm_source, *sigint_source, *sighup_source;
        K8sClient *k8s;
        CsiClient *csi;
        VolumeManager *volumes;
        VolumeStats *volume_stats; /* NodeGetVolumeStats rounds, for kubelet_volume_stats_* */
        Metrics *metrics;
        HttpServer *http; /* NULL when [metrics] listen is empty */
        LocalApi *api;    /* the pod runner's socket; NULL when [api] socket is empty */
        char *status;     /* the last STATUS= sent, so that only changes are sent */
        uint64_t status_sent_at;       /* CLOCK_MONOTONIC */
        sd_event_source *status_timer; /* a change waiting for STATUS_INTERVAL_USEC to pass */
        sd_event_source *trim_timer;   /* memory given back once the passes have been quiet a while */
        bool ready;       /* READY=1 sent: synced, or START_READY_GRACE_USEC passed (agent.c) */
        bool synced;      /* the informers have listed once: STATUS= counts volumes from then on */
        sd_event_source *ready_timer; /* READY=1 without the first lists, at the grace's end */
        /* Who the API server says kvolumed is, asked before the volume
         * manager starts; asked again with a backoff while unanswered. */
        K8sIdentityRequest *identity_request;
        sd_event_source *identity_retry;
        uint64_t identity_backoff_usec;
        bool volumes_started;
        Waiting *waiting; /* says why it is not ready yet, and an unreachable API server in STATUS= */
        bool stopping;
        /* Test-only watchdog fault switch (KVOLUMED_TEST_STALL_FILE), NULL otherwise. */
        char *stall_file;
        sd_event_source *stall_source;
        /* Test-only never-idle switch (KVOLUMED_TEST_BUSY_FILE), NULL otherwise. */
        char *busy_file;
        sd_event_source *busy_source, *busy_check;
} Agent;

/* Takes ownership of config; borrows root_lock (root-dir, locked and
 * resolved), which must outlive the agent.  Blocks the signals it handles, connects the
 * API client and the CSI client, creates the volume manager, and serves
 * /metrics, /healthz and /volumes when [metrics] listen is set. */
int agent_new(const char *config_path, Config *config, RootLock *root_lock, Agent **ret);
Agent *agent_free(Agent *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(Agent *, agent_free);

/* Runs until SIGTERM/SIGINT.  First asks the API server who kvolumed is
 * (a SelfSubjectReview) and logs it; the volume manager starts once that is
 * answered, or at once when the server cannot be reached (asked again then).
 * READY=1 is sent once the volumes on disk are
 * reconstructed and the pods, CSIDrivers and Node are listed, or at the
 * latest START_READY_GRACE_USEC after the start with STATUS= saying what it
 * still waits for (an API server away never holds the start back, so systemd
 * never kills nor restarts kvolumed for it); STATUS= then follows the volume
 * counts.  Returns 0 on a clean stop, 1 when the API
 * server says the credential is another node's (a configuration error), or
 * -errno. */
int agent_run(Agent *a);

/* Re-reads the configuration file, between RELOADING=1 and READY=1.  Only the
 * log level is applied live; every other changed setting is named in a warning
 * and keeps its running value until the next restart.  On error the running
 * configuration stays and the reason is logged. */
int agent_reload(Agent *a);
