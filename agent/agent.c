/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <stdio.h>

#include "agent/agent.h"
#include "systemd/log.h"
#include "systemd/notify.h"

/* Settings that are applied while running; every other change needs a restart. */
static const char *const live_settings[] = { "log.level" };

static int on_stop_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Agent *a = userdata;

        log_info("Received %s, stopping; volumes stay as they are", strsignal((int) si->ssi_signo));
        (void) notify_stopping();
        return sd_event_exit(a->event, 0);
}

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        (void) agent_reload(userdata);
        return 0;
}

int agent_new(const char *config_path, Config *config, Agent **ret) {
        _cleanup_(agent_freep) Agent *a = NULL;
        sigset_t mask;
        int r;

        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->config = config;
        a->config_path = strdup(config_path);
        if (!a->config_path)
                return -ENOMEM;

        r = sd_event_default(&a->event);
        if (r < 0)
                return log_error_errno(r, "Failed to create the event loop: %m");

        /* sd-event delivers signals through a signalfd, which needs them blocked. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        /* A stopping agent must not die of a closed pipe to a driver or the API. */
        (void) signal(SIGPIPE, SIG_IGN);

        r = sd_event_add_signal(a->event, &a->sigterm_source, SIGTERM, on_stop_signal, a);
        if (r >= 0)
                r = sd_event_add_signal(a->event, &a->sigint_source, SIGINT, on_stop_signal, a);
        if (r >= 0)
                r = sd_event_add_signal(a->event, &a->sighup_source, SIGHUP, on_sighup, a);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");

        r = notify_watchdog_setup(a->event);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(a);
        return 0;
}

Agent *agent_free(Agent *a) {
        if (!a)
                return NULL;
        sd_event_source_disable_unref(a->sigterm_source);
        sd_event_source_disable_unref(a->sigint_source);
        sd_event_source_disable_unref(a->sighup_source);
        sd_event_unref(a->event);
        config_free(a->config);
        free(a->config_path);
        free(a);
        return NULL;
}

static char *config_listing(const Config *c) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        if (!f)
                return NULL;
        config_print(c, f);
        if (fclose(f) != 0)
                return mfree_str(text);
        return text;
}

static bool is_live_setting(const char *line) {
        for (size_t i = 0; i < ELEMENTSOF(live_settings); i++) {
                size_t n = strlen(live_settings[i]);
                if (strncmp(line, live_settings[i], n) == 0 && line[n] == ' ')
                        return true;
        }
        return false;
}

/* Names each changed setting that is only read at start-up. */
static void warn_restart_needed(const Config *old, const Config *new) {
        _cleanup_free_ char *a = config_listing(old), *b = config_listing(new);
        char *save = NULL;

        if (!a || !b)
                return;
        for (char *line = strtok_r(b, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *found = strstr(a, line);
                bool same = found && (found == a || found[-1] == '\n') && (found[strlen(line)] == '\n');
                if (!same && !is_live_setting(line))
                        log_warning("Configuration changed: \"%s\" takes effect at the next restart", line);
        }
}

int agent_reload(Agent *a) {
        _cleanup_(config_freep) Config *new = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        (void) notify_reloading();
        log_info("Reloading the configuration from %s", a->config_path);
        r = config_load(a->config_path, &new, &error);
        if (r < 0) {
                log_error("Keeping the running configuration: %s", error ? error : strerror(-r));
                (void) notify_ready();
                return r;
        }
        warn_restart_needed(a->config, new);
        /* Said at the old level, so that the reload which quietens the log is still seen. */
        log_info("Configuration reloaded, log level %s", log_level_to_string(new->log_level));
        log_set_max_level(new->log_level);
        config_free(a->config);
        a->config = TAKE_PTR(new);
        (void) notify_ready();
        return 0;
}

int agent_run(Agent *a) {
        int r;

        log_info("kvolumed " KVOLUMED_VERSION " starting for node %s, root-dir %s", a->config->node_name,
                 a->config->root_dir);
        (void) notify_ready();
        (void) notify_status("Running on node %s", a->config->node_name);

        r = sd_event_loop(a->event);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        log_info("kvolumed stopped");
        return r;
}
