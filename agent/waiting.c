/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>

#include "agent/waiting.h"
#include "systemd/log.h"
#include "systemd/notify.h"

struct Waiting {
        sd_event *event;
        K8sClient *k8s;
        VolumeManager *volumes;
        WaitingHooks hooks;
        sd_event_source *timer;
        uint64_t started;
        uint64_t next_log_usec, log_interval_usec; /* the journal's reports back off */
        char *api_text;
};

static uint64_t now_usec(Waiting *w) {
        uint64_t now = 0;
        (void) sd_event_now(w->event, CLOCK_MONOTONIC, &now);
        return now;
}

const char *waiting_api_text(Waiting *w) {
        const char *error = NULL;
        uint64_t since = k8s_client_unreachable_since(w->k8s, &error);

        w->api_text = mfree_str(w->api_text);
        if (since == 0)
                return NULL;
        if (asprintf(&w->api_text, "API server %s unreachable for %.0f s (%s)", k8s_client_server(w->k8s),
                     (double) (now_usec(w) - MIN(since, now_usec(w))) / USEC_PER_SEC, strempty(error)) < 0)
                w->api_text = NULL;
        return w->api_text;
}

static int on_tick(sd_event_source *s, uint64_t usec, void *userdata) {
        Waiting *w = userdata;

        bool log = usec >= w->next_log_usec;

        /* STATUS= at every tick; the journal at the first two, then 60 s,
         * 120 s ... 10 min apart: a control plane away for a day was a
         * notice every 30 s (2,880 lines) on every node. */
        if (log) {
                w->log_interval_usec = w->log_interval_usec ? MIN(w->log_interval_usec * 2, WAITING_LOG_MAX_USEC)
                                                            : WAITING_REPORT_INTERVAL_USEC;
                w->next_log_usec = usec + w->log_interval_usec;
        }
        (void) sd_event_source_set_time(s, usec + WAITING_REPORT_INTERVAL_USEC);
        waiting_report(w, log);
        return 0;
}

void waiting_report(Waiting *w, bool log) {
        const char *what = volume_manager_waiting_for(w->volumes), *api;
        _cleanup_free_ char *text = NULL;

        if (w->hooks.synced(w->hooks.userdata) || !what) {
                /* Ready: the status line tells an unreachable API server. */
                w->hooks.refresh_status(w->hooks.userdata);
                return;
        }
        api = waiting_api_text(w);
        if (api)
                (void) asprintf(&text, "Waiting for %s: %s", what, api);
        else
                (void) asprintf(&text, "Waiting for %s: the API server answers, %.0f s since start", what,
                                (double) (now_usec(w) - w->started) / USEC_PER_SEC);
        if (!text)
                return;
        if (log)
                log_notice("%s", text);
        (void) notify_status("%s", text);
}

int waiting_new(sd_event *event, K8sClient *k8s, VolumeManager *volumes, const WaitingHooks *hooks,
                Waiting **ret) {
        _cleanup_(waiting_freep) Waiting *w = NULL;
        int r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->event = sd_event_ref(event);
        w->k8s = k8s;
        w->volumes = volumes;
        w->hooks = *hooks;
        w->started = now_usec(w);
        r = sd_event_add_time_relative(event, &w->timer, CLOCK_MONOTONIC, WAITING_FIRST_REPORT_USEC,
                                       USEC_PER_SEC, on_tick, w);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(w->timer, SD_EVENT_ON);
        (void) sd_event_source_set_description(w->timer, "waiting-report");
        *ret = TAKE_PTR(w);
        return 0;
}

Waiting *waiting_free(Waiting *w) {
        if (!w)
                return NULL;
        sd_event_source_disable_unref(w->timer);
        sd_event_unref(w->event);
        free(w->api_text);
        free(w);
        return NULL;
}
