/* SPDX-License-Identifier: Apache-2.0 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/check.h"
#include "agent/version.h"
#include "systemd/log.h"
#include "systemd/notify.h"
#include "systemd/testhook.h"
#include "systemd/trace.h"
#include "volume/kinds/emptydir-usage.h"

#define STATUS_INTERVAL_USEC USEC_PER_SEC

/* A stats call's deadline: short, so that a hung driver costs little (a
 * driver's round waits for it), and never longer than any call may take. */
static uint64_t stats_timeout(const Config *c) {
        return MIN(VOLUME_STATS_DEFAULT_TIMEOUT_USEC, c->call_timeout_usec ?: VOLUME_STATS_DEFAULT_TIMEOUT_USEC);
}

static void on_volumes_stopped(VolumeManager *m, void *userdata) {
        Agent *a = userdata;
        (void) sd_event_exit(a->event, 0);
}

static int on_stop_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Agent *a = userdata;

        if (a->stopping) {
                log_warning("Received %s again, stopping without waiting for operations in flight",
                            strsignal((int) si->ssi_signo));
                return sd_event_exit(a->event, 0);
        }
        a->stopping = true;
        log_info("Received %s, stopping; volumes stay as they are", strsignal((int) si->ssi_signo));
        if (!a->volumes_started)
                return sd_event_exit(a->event, 0);
        (void) notify_stopping();
        (void) notify_status("Stopping: letting the operations in flight finish; volumes stay as they are");
        volume_stats_stop(a->volume_stats);
        /* CSI calls in flight finish (or time out) first, so that no volume is
         * left in a state nobody recorded. */
        volume_manager_stop(a->volumes, on_volumes_stopped, a);
        return 0;
}

/* TEST ONLY (KVOLUMED_TEST_PREPARE_DELAY_MS): a slow root-dir file system. */
static uint64_t test_prepare_delay_usec(void) {
        const char *ms = test_hook_getenv("PREPARE_DELAY_MS");
        return ms ? (uint64_t) strtoul(ms, NULL, 10) * USEC_PER_MSEC : 0;
}

static int connect_clients(Agent *a) {
        const Config *c = a->config;
        _cleanup_free_ char *error = NULL;
        _cleanup_free_ CsiDriverEndpoint *drivers = NULL;
        K8sAuth *auth = NULL;
        int r;

        r = check_resolve_auth(c, &auth, &error);
        if (r < 0)
                return log_error_errno(r, "Cannot use the [kubernetes] settings: %s", error ? error : strerror(-r));
        r = k8s_client_new(a->event, auth, &(K8sClientOptions){}, &a->k8s);
        if (r < 0)
                return log_error_errno(r, "Failed to create the API client: %m");

        drivers = calloc(c->n_drivers + 1, sizeof *drivers);
        if (!drivers)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_drivers; i++)
                drivers[i] = (CsiDriverEndpoint){ c->drivers[i].name, c->drivers[i].endpoint };
        r = csi_client_new(a->event,
                           &(CsiClientOptions){ .call_timeout_usec = c->call_timeout_usec,
                                                .max_parallel = c->max_parallel,
                                                .registration_dir = c->registration_dir,
                                                .drivers = drivers,
                                                .n_drivers = c->n_drivers },
                           &a->csi);
        if (r < 0)
                return log_error_errno(r, "Failed to create the CSI client: %m");

        r = volume_manager_new(a->event, a->k8s, a->csi,
                               &(VolumeManagerOptions){ .node_name = c->node_name,
                                                        .root_dir = root_lock_path(a->root_lock),
                                                        .root_lock = a->root_lock,
                                                        .resync_interval_usec = c->resync_interval_usec,
                                                        .republish_interval_usec = c->republish_interval_usec,
                                                        .expand_check_interval_usec = c->expand_check_interval_usec,
                                                        .attach_limit_refresh_usec = c->attach_limit_refresh_usec,
                                                        .selinux_mount_all = c->selinux_mount_all,
                                                        .runner_kinds = c->runner_kinds,
                                                        .runtime_endpoint = c->runtime_endpoint,
                                                        .mount_source_mountinfo = c->mount_source_mountinfo,
                                                        .max_pending = VOLUME_PENDING_PER_PARALLEL *
                                                                       (c->max_parallel ?: 64),
                                                        /* TEST ONLY: the integration suite sets it. */
                                                        .verify_incremental =
                                                                test_hook_getenv("VERIFY_INCREMENTAL") != NULL,
                                                        .prepare_delay_usec = test_prepare_delay_usec() },
                               &a->volumes);
        if (r < 0)
                return log_error_errno(r, "Failed to create the volume manager: %m");
        /* The emptyDirs' usage is measured as often as the CSI volumes'. */
        emptydir_usage_set_interval(c->stats_interval_usec);
        r = volume_stats_new(a->volumes, c->stats_interval_usec, stats_timeout(c), &a->volume_stats);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the volume stats: %m");
        return 0;
}

/* ---- the metrics and debug endpoint ----------------------------------------- */

static void update_status(Agent *a);

static int on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        update_status(userdata);
        return 0;
}

/* What "systemctl status" shows: the pod volumes in each state, in the
 * words and from the judgement of kvolumed_volumes{state}, /volumes and
 * "kvolumed status" (volume/state/podstate.c), then whatever else is not zero. */
static int status_text(const char *node, const VolumeManagerStats *st, const char *api, char **ret) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        unsigned published = st->by_state[POD_VOLUME_PUBLISHED];

        if (!f)
                return -ENOMEM;
        fprintf(f, "Running on node %s: %u pod volume%s published, %u pending, %u failed, %u tearing-down", node,
                published, published == 1 ? "" : "s", st->by_state[POD_VOLUME_PENDING],
                st->by_state[POD_VOLUME_FAILED], st->by_state[POD_VOLUME_TEARING_DOWN]);
        if (st->attach_waiting > 0)
                fprintf(f, ", %u waiting for attach", st->attach_waiting);
        if (st->unresponsive > 0)
                fprintf(f, ", %u unresponsive", st->unresponsive);
        if (st->uncertain > 0)
                fprintf(f, ", %u uncertain", st->uncertain);
        if (st->running > 0)
                fprintf(f, "; %u operations in flight", st->running);
        if (api)
                fprintf(f, "; %s", api);
        if (fclose(f) != 0)
                return -ENOMEM;
        *ret = TAKE_PTR(text);
        return 0;
}

/* STATUS= for "systemctl status": sent only when the counts changed, and at
 * most once per STATUS_INTERVAL_USEC.  sd_notify() blocks once the receiver's
 * queue is full (ten datagrams by default): a burst of passes must never
 * make the loop wait for the service manager. */
static void update_status(Agent *a) {
        VolumeManagerStats st = {};
        _cleanup_free_ char *text = NULL;
        const char *lost;
        uint64_t now = 0;

        (void) sd_event_now(a->event, CLOCK_MONOTONIC, &now);
        if (a->status_sent_at && now < a->status_sent_at + STATUS_INTERVAL_USEC) {
                int enabled = SD_EVENT_OFF;
                if (a->status_timer)
                        (void) sd_event_source_get_enabled(a->status_timer, &enabled);
                if (enabled != SD_EVENT_OFF)
                        return;
                if (!a->status_timer &&
                    sd_event_add_time(a->event, &a->status_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC,
                                      on_status_timer, a) < 0)
                        return;
                (void) sd_event_source_set_time(a->status_timer, a->status_sent_at + STATUS_INTERVAL_USEC);
                (void) sd_event_source_set_enabled(a->status_timer, SD_EVENT_ONESHOT);
                return;
        }
        lost = volume_manager_root_lost(a->volumes);
        if (!lost && !a->synced)
                return; /* the waiting reports say what it waits for (waiting.c) */
        /* The bench's figure of what the counts cost the loop (mount_bench.py --trace). */
        uint64_t counting = test_trace_now();
        volume_manager_get_counts(a->volumes, &st);
        test_trace_at(counting, "status-counting", NULL);
        test_trace("status-counted", NULL);
        if (lost ? asprintf(&text, "Not acting on volumes: %s", lost) < 0
                 : status_text(a->config->node_name, &st, a->waiting ? waiting_api_text(a->waiting) : NULL,
                               &text) < 0)
                return;
        if (streq_ptr(text, a->status))
                return;
        (void) notify_status("%s", text);
        a->status_sent_at = now;
        free(a->status);
        a->status = TAKE_PTR(text);
}

/* A burst (a node's pods starting at once, a storm of API events) leaves
 * the heap holding what its requests and calls needed at their peak; glibc
 * gives back only what lies at the top of the heap.  Once no pass has run for
 * this long, the free memory inside the heap is returned too (measured: 25 →
 * 22 MiB RSS idle after 1,000 volumes were published at once). */
#define TRIM_QUIET_USEC (2 * USEC_PER_SEC)

static int on_trim_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) malloc_trim(0);
        return 0;
}

static void trim_when_quiet(Agent *a) {
        if (!a->trim_timer &&
            sd_event_add_time_relative(a->event, &a->trim_timer, CLOCK_MONOTONIC, TRIM_QUIET_USEC,
                                       USEC_PER_SEC / 4, on_trim_timer, a) < 0)
                return;
        (void) sd_event_source_set_time_relative(a->trim_timer, TRIM_QUIET_USEC);
        (void) sd_event_source_set_enabled(a->trim_timer, SD_EVENT_ONESHOT);
}

/* READY=1 tells systemd that the start is over: "systemctl start" returns,
 * TimeoutStartSec= stops counting, units ordered after kvolumed start.  It
 * is sent at the first sync (reconstructed, pods, CSIDrivers and Node
 * listed) or, when the API server has not given those lists by then,
 * START_READY_GRACE_USEC after the start, STATUS= saying what kvolumed waits
 * for.  Not EXTEND_TIMEOUT_USEC while waiting: the start would last as long
 * as the control plane's outage, "systemctl start" (and apt, and a boot's
 * multi-user.target) would block as long, and a failed-unit alert would
 * still fire on every node when the extension ran out.  Nothing of the
 * node's own is missing at the grace's end: root-dir is locked, what is on
 * disk reconstructed and kept as it is, the local API answers (its waiters
 * wait for the lists). */
#define START_READY_GRACE_USEC (10 * USEC_PER_SEC)

static void send_ready(Agent *a) {
        a->ready = true;
        a->ready_timer = sd_event_source_disable_unref(a->ready_timer);
        (void) notify_ready();
}

static int on_ready_grace(sd_event_source *s, uint64_t usec, void *userdata) {
        Agent *a = userdata;
        const char *what = volume_manager_waiting_for(a->volumes);

        a->ready_timer = sd_event_source_disable_unref(a->ready_timer);
        if (a->ready || a->stopping)
                return 0;
        log_notice("Up without the API server's lists after %.0f s: READY=1 sent, so that systemd neither times "
                   "the start out nor restarts kvolumed; volumes on disk stay as they are, and pods are set up once "
                   "%s is read",
                   (double) START_READY_GRACE_USEC / USEC_PER_SEC, what ?: "the first pod list");
        send_ready(a);
        waiting_report(a->waiting, false);
        return 0;
}

/* Called after every reconcile pass; the first one runs as soon as the
 * informers have synced. */
static void on_pass_done(uint64_t duration_usec, void *userdata) {
        Agent *a = userdata;

        trim_when_quiet(a);

        metrics_observe_reconcile(a->metrics, (double) duration_usec / 1e6);
        if (a->stopping)
                return;
        if (!a->synced && volume_manager_synced(a->volumes)) {
                a->synced = true;
                log_info("Ready: volumes on disk reconstructed, pods, CSIDrivers and node %s listed",
                         a->config->node_name);
                if (!a->ready)
                        send_ready(a);
        }
        if (a->synced)
                update_status(a);
}

/* root-dir stopped or started again being the directory kvolumed locked:
 * STATUS= says so (the journal has said why, once). */
static void on_root_changed(const char *lost, void *userdata) {
        Agent *a = userdata;
        if (!a->stopping)
                update_status(a);
}

static void read_volume_stats(VolumeManagerStats *ret, void *userdata) {
        Agent *a = userdata;
        volume_manager_get_counts(a->volumes, ret); /* the counts STATUS= shows (issue 34) */
}

/* ---- the families read at each scrape ---- */

static void collect_volume_usage(const VolumeStatsSample *x, void *userdata) {
        MetricsScrape *s = userdata;
        const char *const labels[] = { x->namespace, x->claim };

        if (x->has_bytes) {
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_AVAILABLE_BYTES, labels, (double) x->available_bytes);
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_CAPACITY_BYTES, labels, (double) x->capacity_bytes);
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_USED_BYTES, labels, (double) x->used_bytes);
        }
        if (x->has_inodes) {
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_INODES, labels, (double) x->inodes);
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_INODES_FREE, labels, (double) x->inodes_free);
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_INODES_USED, labels, (double) x->inodes_used);
        }
        if (x->has_condition)
                (void) metrics_scrape_add(s, METRICS_VOLUME_STATS_HEALTH_ABNORMAL, labels, x->abnormal ? 1 : 0);
}

static void collect_volume_count(const char *plugin_name, const char *driver, unsigned desired, unsigned actual,
                                 void *userdata) {
        MetricsScrape *s = userdata;
        _cleanup_free_ char *plugin = NULL;

        /* kubelet's full plugin name (GetFullQualifiedPluginNameForVolume):
         * a CSI volume's with its driver, and only the counts it has. */
        if ((driver ? asprintf(&plugin, "%s:%s", plugin_name, driver) : asprintf(&plugin, "%s", plugin_name)) < 0)
                return;
        if (actual > 0)
                (void) metrics_scrape_add(s, METRICS_VOLUME_MANAGER_TOTAL_VOLUMES,
                                          (const char *const[]){ plugin, "actual_state_of_world" }, actual);
        if (desired > 0)
                (void) metrics_scrape_add(s, METRICS_VOLUME_MANAGER_TOTAL_VOLUMES,
                                          (const char *const[]){ plugin, "desired_state_of_world" }, desired);
}

static void collect_watch_restarts(const char *resource, unsigned restarts, void *userdata) {
        (void) metrics_scrape_add(userdata, METRICS_API_WATCH_RESTARTS, (const char *const[]){ resource }, restarts);
}

static void collect_csi_calls(const char *driver, unsigned in_flight, unsigned queued, void *userdata) {
        (void) metrics_scrape_add(userdata, METRICS_CSI_CALLS_IN_FLIGHT, (const char *const[]){ driver }, in_flight);
        (void) metrics_scrape_add(userdata, METRICS_CSI_CALLS_QUEUED, (const char *const[]){ driver }, queued);
}

static void collect_failed(const char *reason, const char *driver, unsigned n, void *userdata) {
        (void) metrics_scrape_add(userdata, METRICS_VOLUMES_FAILED, (const char *const[]){ driver, reason }, n);
}

typedef struct DriverScrape {
        MetricsScrape *s;
        CsiClient *csi;
} DriverScrape;

static void collect_driver(const char *driver, void *userdata) {
        DriverScrape *d = userdata;
        (void) metrics_scrape_add(d->s, METRICS_CSI_DRIVER_REGISTERED, (const char *const[]){ driver },
                                  csi_client_has_driver(d->csi, driver) ? 1 : 0);
}

static void collect_driver_calls(const char *driver, unsigned in_flight, unsigned queued, void *userdata) {
        collect_driver(driver, userdata);
}

static void collect_metrics(MetricsScrape *s, void *userdata) {
        Agent *a = userdata;
        DriverScrape drivers = { .s = s, .csi = a->csi };

        /* What an operator alerts on: who fixes a failed volume, how long
         * the oldest waits, whether the drivers the pods want are there. */
        double node, tenant;
        volume_manager_count_failed(a->volumes, collect_failed, s);
        volume_manager_oldest_unready(a->volumes, &node, &tenant);
        (void) metrics_scrape_add(s, METRICS_VOLUMES_OLDEST_UNREADY, (const char *const[]){ "node" }, node);
        (void) metrics_scrape_add(s, METRICS_VOLUMES_OLDEST_UNREADY, (const char *const[]){ "tenant" }, tenant);
        csi_client_foreach_driver_calls(a->csi, collect_driver_calls, &drivers);
        volume_manager_foreach_wanted_driver(a->volumes, collect_driver, &drivers);

        volume_stats_foreach(a->volume_stats, collect_volume_usage, s);
        volume_manager_count_volumes(a->volumes, collect_volume_count, s);
        volume_manager_count_watch_restarts(a->volumes, collect_watch_restarts, s);
        csi_client_foreach_driver_calls(a->csi, collect_csi_calls, s);

        VolumeRuntimeStats rt;
        volume_manager_get_runtime_stats(a->volumes, &rt);
        if (rt.configured) {
                (void) metrics_scrape_add(s, METRICS_RUNTIME_ERRORS, NULL, (double) rt.errors);
                (void) metrics_scrape_add(s, METRICS_RUNTIME_UNREACHABLE, NULL, rt.unreachable ? 1 : 0);
                (void) metrics_scrape_add(s, METRICS_RUNTIME_WAITING_PODS, NULL, rt.waiting);
        }
}

static int serve_metrics(FILE *f, const char **content_type, void *userdata) {
        Agent *a = userdata;
        *content_type = METRICS_CONTENT_TYPE;
        return metrics_write(a->metrics, f) < 0 ? -EIO : 200;
}

/* Answered from the loop, so a wedged loop fails the probe as well; healthy
 * once the informers have listed (what READY=1 waits for).  A watch that
 * drops later keeps the cached state: still healthy, as kubelet's is.  Not
 * healthy while root-dir is not the directory kvolumed locked: it does
 * nothing for the node's volumes then (volume/host/rootwatch.c). */
static int serve_healthz(FILE *f, const char **content_type, void *userdata) {
        Agent *a = userdata;
        const char *lost = volume_manager_root_lost(a->volumes);

        if (a->stopping) {
                fputs("stopping\n", f);
                return 503;
        }
        if (lost) {
                fprintf(f, "not acting on volumes: %s\n", lost);
                return 503;
        }
        if (!volume_manager_synced(a->volumes)) {
                fputs("not synced: waiting for the first list of pods, CSIDrivers and the node\n", f);
                return 503;
        }
        fputs("ok", f);
        return 200;
}

/* /volumes on a non-loopback address: where to find it instead. */
static int serve_volumes_off(FILE *f, const char **content_type, void *userdata) {
        Agent *a = userdata;
        *content_type = "application/json";
        if (a->config->api_socket)
                fprintf(f, "{\"error\":\"/volumes is served on loopback addresses and on the local API socket "
                        "only: curl --unix-socket %s http://localhost/volumes\"}\n", a->config->api_socket);
        else
                fputs("{\"error\":\"/volumes is served on loopback addresses and on the local API socket only "
                      "([api] socket)\"}\n", f);
        return 404;
}

static int start_http(Agent *a, const char *listen, HttpServer **ret) {
        _cleanup_(http_server_freep) HttpServer *http = NULL;
        int r;

        r = http_server_new(a->event, listen, &http);
        if (r < 0)
                return r;
        r = http_server_add_route(http, "/metrics", serve_metrics, a);
        if (r >= 0)
                r = http_server_add_route(http, "/healthz", serve_healthz, a);
        /* /volumes names every pod, handle and path of the node: not for
         * whoever reaches a non-loopback port without authentication. */
        if (r >= 0)
                r = config_listen_is_loopback(listen) ? local_api_add_volumes_route(http, a->volumes)
                                                      : http_server_add_route(http, "/volumes", serve_volumes_off, a);
        if (r < 0)
                return log_error_errno(r, "Failed to add the HTTP routes: %m");
        if (config_listen_is_loopback(listen))
                log_info("Serving /metrics, /healthz, /volumes on %s", http_server_address(http));
        else {
                log_info("Serving /metrics, /healthz on %s", http_server_address(http));
                log_warning("[metrics] listen = %s is reachable beyond this host: /metrics and /healthz are served "
                            "there without authentication; /volumes is not (it is on the local API socket%s%s)",
                            listen, a->config->api_socket ? " " : "", strempty(a->config->api_socket));
        }
        *ret = TAKE_PTR(http);
        return 0;
}

static int setup_metrics(Agent *a) {
        int r;

        r = metrics_new(&a->metrics);
        if (r < 0)
                return log_error_errno(r, "Failed to create the metrics registry: %m");
        csi_client_set_metrics_hook(a->csi, metrics_csi_hook, a->metrics);
        k8s_client_set_request_hook(a->k8s, metrics_k8s_hook, a->metrics);
        metrics_enable_process(a->metrics);
        r = metrics_set_build_info(a->metrics, KVOLUMED_BUILD_VERSION, KVOLUMED_COMMIT);
        if (r < 0)
                return log_error_errno(r, "Failed to set kvolumed_build_info: %m");
        volume_manager_set_metrics_hook(a->volumes, metrics_volume_hook, a->metrics);
        volume_manager_set_pass_hook(a->volumes, on_pass_done, a);
        volume_manager_set_root_hook(a->volumes, on_root_changed, a);
        metrics_set_volume_stats_source(a->metrics, read_volume_stats, a);
        metrics_set_collector(a->metrics, collect_metrics, a);

        if (isempty(a->config->metrics_listen)) {
                log_info("[metrics] listen is empty: no /metrics endpoint");
                return 0;
        }
        /* A port that cannot be bound fails start-up: a scraper would otherwise
         * see a silent node. */
        return start_http(a, a->config->metrics_listen, &a->http);
}

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        (void) agent_reload(userdata);
        return 0;
}

/* TEST ONLY — the watchdog fault switch.  With KVOLUMED_TEST_STALL_FILE=PATH
 * in the environment (the real-systemd test sets it in a drop-in), the loop
 * looks for PATH once a second; when it appears, it is removed (so that the
 * restarted daemon runs normally) and the loop blocks for good: no more
 * watchdog pings, and systemd's WatchdogSec= must kill and restart us.
 * Without the variable, or in a build without -Dtest-hooks=true, nothing of
 * this exists. */
static int on_stall_check(sd_event_source *s, uint64_t usec, void *userdata) {
        Agent *a = userdata;

        if (unlink(a->stall_file) < 0) {
                (void) sd_event_source_set_time_relative(s, USEC_PER_SEC);
                return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        }
        log_warning("Test fault switch %s found: blocking the event loop until the watchdog fires", a->stall_file);
        for (;;)
                (void) sleep(3600);
}

static int setup_stall_switch(Agent *a) {
        const char *path = test_hook_getenv("STALL_FILE");
        int r;

        if (isempty(path))
                return 0;
        a->stall_file = strdup(path);
        if (!a->stall_file)
                return -ENOMEM;
        r = sd_event_add_time_relative(a->event, &a->stall_source, CLOCK_MONOTONIC, USEC_PER_SEC, USEC_PER_MSEC,
                                       on_stall_check, a);
        if (r < 0)
                return log_error_errno(r, "Failed to add the test stall switch: %m");
        log_warning("Test fault switch armed: the event loop blocks when %s appears", a->stall_file);
        return 0;
}

/* TEST ONLY — a loop that never goes idle.  With KVOLUMED_TEST_BUSY_FILE=PATH
 * in the environment, while PATH exists a timer at normal priority is due on
 * every iteration, as a node whose work never stops keeps the loop: each
 * time it is dispatched it is due again, behind the sources that became
 * pending meanwhile (a deferred source would stay pending with its first
 * turn's place and starve them), so everything else still takes its turn
 * and nothing at idle priority ever runs.  Looked for every 50 ms, at a priority the busy
 * source cannot starve.  Without the variable nothing of this exists. */
static int on_busy(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) sd_event_source_set_time(s, 1); /* long past: due at once */
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int on_busy_check(sd_event_source *s, uint64_t usec, void *userdata) {
        Agent *a = userdata;
        int enabled = SD_EVENT_OFF;
        bool want = access(a->busy_file, F_OK) == 0;

        (void) sd_event_source_get_enabled(a->busy_source, &enabled);
        if (want != (enabled != SD_EVENT_OFF)) {
                log_warning("Test busy switch %s: the loop is %s", a->busy_file, want ? "never idle" : "idle again");
                (void) sd_event_source_set_enabled(a->busy_source, want ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
        }
        (void) sd_event_source_set_time_relative(s, 50 * USEC_PER_MSEC);
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int setup_busy_switch(Agent *a) {
        const char *path = test_hook_getenv("BUSY_FILE");
        int r;

        if (isempty(path))
                return 0;
        a->busy_file = strdup(path);
        if (!a->busy_file)
                return -ENOMEM;
        r = sd_event_add_time(a->event, &a->busy_source, CLOCK_MONOTONIC, 1, 1, on_busy, a);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(a->busy_source, SD_EVENT_OFF);
        r = sd_event_add_time_relative(a->event, &a->busy_check, CLOCK_MONOTONIC, 50 * USEC_PER_MSEC,
                                       USEC_PER_MSEC, on_busy_check, a);
        if (r < 0)
                return log_error_errno(r, "Failed to add the test busy switch: %m");
        (void) sd_event_source_set_priority(a->busy_check, SD_EVENT_PRIORITY_IMPORTANT);
        log_warning("Test busy switch armed: the loop never goes idle while %s exists", a->busy_file);
        return 0;
}

int agent_new(const char *config_path, Config *config, RootLock *root_lock, Agent **ret) {
        _cleanup_(agent_freep) Agent *a = NULL;
        sigset_t mask;
        int r;

        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->config = config;
        a->root_lock = root_lock;
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
        r = connect_clients(a);
        if (r < 0)
                return r;
        r = setup_metrics(a);
        if (r < 0)
                return r;
        r = setup_stall_switch(a);
        if (r >= 0)
                r = setup_busy_switch(a);
        if (r < 0)
                return r;
        if (a->config->api_socket) {
                /* The pod runner waits on it: a socket that cannot be made fails start-up. */
                r = local_api_new(a->event, a->volumes, a->config->api_socket, a->config->api_gid, &a->api);
                if (r < 0)
                        return r;
        } else
                log_info("[api] socket is empty: no local volumes API");

        *ret = TAKE_PTR(a);
        return 0;
}

Agent *agent_free(Agent *a) {
        if (!a)
                return NULL;
        k8s_identity_request_cancel(a->identity_request);
        sd_event_source_disable_unref(a->identity_retry);
        sd_event_source_disable_unref(a->ready_timer);
        sd_event_source_disable_unref(a->sigterm_source);
        sd_event_source_disable_unref(a->sigint_source);
        sd_event_source_disable_unref(a->sighup_source);
        sd_event_source_disable_unref(a->stall_source);
        free(a->stall_file);
        sd_event_source_disable_unref(a->busy_source);
        sd_event_source_disable_unref(a->busy_check);
        free(a->busy_file);
        sd_event_source_disable_unref(a->status_timer);
        sd_event_source_disable_unref(a->trim_timer);
        waiting_free(a->waiting);
        free(a->status);
        /* Its handlers read the manager and the metrics. */
        http_server_free(a->http);
        local_api_free(a->api); /* its waiters watch the manager */
        /* The stats borrow the manager, the manager both clients. */
        volume_stats_free(a->volume_stats);
        volume_manager_free(a->volumes);
        csi_client_free(a->csi);
        k8s_client_free(a->k8s);
        /* Last: cancelling calls above still reports them to the hooks. */
        metrics_free(a->metrics);
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

/* Names each changed setting that is only read at start-up (what a SIGHUP
 * applies is conf/'s config_setting_reloadable()); the running value is kept
 * until the next restart. */
static void warn_restart_needed(const Config *old, const Config *new) {
        _cleanup_free_ char *a = config_listing(old), *b = config_listing(new);
        char *save = NULL;

        if (!a || !b)
                return;
        for (char *line = strtok_r(b, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *found = strstr(a, line);
                bool same = found && (found == a || found[-1] == '\n') && (found[strlen(line)] == '\n');
                if (!same && !config_setting_reloadable(line))
                        log_warning("Configuration changed: \"%s\" takes effect at the next restart", line);
        }
}

static bool same_drivers(const Config *x, const Config *y) {
        if (x->n_drivers != y->n_drivers)
                return false;
        for (size_t i = 0; i < x->n_drivers; i++) {
                bool found = false;
                for (size_t j = 0; j < y->n_drivers && !found; j++)
                        found = streq(x->drivers[i].name, y->drivers[j].name) &&
                                streq(x->drivers[i].endpoint, y->drivers[j].endpoint);
                if (!found)
                        return false;
        }
        return true;
}

/* Takes over what can change under a running agent.  A part that fails
 * (a metrics address that cannot be bound, say) keeps its old value, says
 * why, and the rest still applies.  "new" gives up what is taken over. */
static void apply_live_settings(Agent *a, Config *new) {
        Config *old = a->config;
        int r;

        if (new->call_timeout_usec != old->call_timeout_usec || new->max_parallel != old->max_parallel) {
                csi_client_set_limits(a->csi, new->call_timeout_usec, new->max_parallel);
                old->call_timeout_usec = new->call_timeout_usec;
                old->max_parallel = new->max_parallel;
                log_info("CSI calls now time out after %.1f s, at most %u in flight per driver",
                         (double) (old->call_timeout_usec ?: 2 * USEC_PER_MINUTE) / USEC_PER_SEC,
                         old->max_parallel ?: 64);
        }
        if (new->stats_interval_usec != old->stats_interval_usec ||
            new->call_timeout_usec != old->call_timeout_usec) {
                volume_stats_set_interval(a->volume_stats, new->stats_interval_usec, stats_timeout(new));
                emptydir_usage_set_interval(new->stats_interval_usec);
                old->stats_interval_usec = new->stats_interval_usec;
        }
        if (new->republish_interval_usec != old->republish_interval_usec) {
                volume_manager_set_republish_interval(a->volumes, new->republish_interval_usec);
                old->republish_interval_usec = new->republish_interval_usec;
        }
        if (!same_drivers(old, new)) {
                _cleanup_free_ CsiDriverEndpoint *drivers = calloc(new->n_drivers + 1, sizeof *drivers);
                for (size_t i = 0; drivers && i < new->n_drivers; i++)
                        drivers[i] = (CsiDriverEndpoint){ new->drivers[i].name, new->drivers[i].endpoint };
                r = drivers ? csi_client_set_static_drivers(a->csi, drivers, new->n_drivers) : -ENOMEM;
                if (r < 0)
                        log_error_errno(r, "Keeping the configured CSI drivers: %m");
                else {
                        SWAP_TWO(old->drivers, new->drivers);
                        SWAP_TWO(old->n_drivers, new->n_drivers);
                }
        }
        if (!streq_ptr(strempty(new->metrics_listen), strempty(old->metrics_listen))) {
                HttpServer *http = NULL;
                r = isempty(new->metrics_listen) ? 0 : start_http(a, new->metrics_listen, &http);
                if (r < 0)
                        log_error_errno(r, "Keeping /metrics on %s: %s cannot be used: %m",
                                        a->http ? http_server_address(a->http) : "(off)", new->metrics_listen);
                else {
                        if (!http)
                                log_info("[metrics] listen is empty now: /metrics is off");
                        http_server_free(a->http);
                        a->http = http;
                        SWAP_TWO(old->metrics_listen, new->metrics_listen);
                }
        }
}

int agent_reload(Agent *a) {
        _cleanup_(config_freep) Config *new = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        /* Before the first READY=1 the service manager still waits for it:
         * neither RELOADING=1 nor READY=1 may be said then. */
        if (a->ready)
                (void) notify_reloading();
        log_info("Reloading the configuration from %s", a->config_path);
        r = config_load(a->config_path, &new, &error);
        if (r < 0) {
                log_error("Keeping the running configuration: %s", error ? error : strerror(-r));
                if (a->ready)
                        (void) notify_ready();
                return r;
        }
        warn_restart_needed(a->config, new);
        apply_live_settings(a, new);
        /* Said at the old level, so that the reload which quietens the log is still seen. */
        log_info("Configuration reloaded, log level %s", log_level_to_string(new->log_level));
        log_set_max_level(new->log_level);
        /* Only the live settings are taken over: the running configuration
         * keeps describing what runs (node-name, root-dir, ...). */
        a->config->log_level = new->log_level;
        if (a->ready)
                (void) notify_ready();
        return 0;
}

/* ---- who the API server says kvolumed is ------------------------------------ */

#define IDENTITY_RETRY_MIN_USEC USEC_PER_SEC
#define IDENTITY_RETRY_MAX_USEC (5 * USEC_PER_MINUTE)

static int ask_identity(Agent *a);

static void start_volumes(Agent *a) {
        int r;

        if (a->volumes_started || a->stopping)
                return;
        a->volumes_started = true;
        /* READY=1 follows from the first reconcile pass (on_pass_done). */
        (void) notify_status("Starting: listing pods, CSIDrivers and node %s", a->config->node_name);
        r = volume_manager_start(a->volumes);
        if (r < 0) {
                log_error_errno(r, "Failed to start the volume manager: %m");
                (void) sd_event_exit(a->event, r);
        }
}

static int on_identity_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Agent *a = userdata;

        a->identity_retry = sd_event_source_disable_unref(a->identity_retry);
        if (ask_identity(a) < 0)
                log_warning("Cannot ask the API server who kvolumed is; not asking again");
        return 0;
}

static void on_identity(K8sClient *c, const K8sIdentity *id, void *userdata) {
        Agent *a = userdata;
        _cleanup_free_ char *who = NULL, *error = NULL, *credential = NULL;
        const char *server = k8s_client_server(c);
        int r;

        a->identity_request = NULL;
        switch (id->result) {
        case K8S_IDENTITY_KNOWN:
                who = k8s_identity_to_string(id);
                r = check_identity(a->config, id, &error);
                if (r == -EPERM) {
                        /* Acting for node-name with another node's credential: the
                         * Node authorizer and NodeRestriction refuse half of what
                         * kvolumed does, silently to the pods.  Not retried. */
                        log_error("Refusing to start: %s", error);
                        (void) sd_event_exit(a->event, 1);
                        return;
                }
                if (k8s_identity_node_name(id))
                        log_info("API server %s says kvolumed is %s", server, strempty(who));
                else
                        log_info("API server %s says kvolumed is %s: not a node identity, so the Node authorizer "
                                 "does not limit it to node %s's objects", server, strempty(who),
                                 a->config->node_name);
                break;
        case K8S_IDENTITY_UNSUPPORTED:
                log_info("API server %s cannot tell who kvolumed is (it serves no SelfSubjectReview, Kubernetes "
                         "before 1.27)", server);
                break;
        case K8S_IDENTITY_FAILED:
                if (id->error == 0 && id->status == 403) {
                        log_info("API server %s cannot tell who kvolumed is: %s", server, strempty(id->message));
                        break;
                }
                /* Unreachable or refusing: the informers wait for the same
                 * server; ask again later, and do not hold the start back. */
                credential = check_describe_credential(a->config);
                a->identity_backoff_usec = MIN(MAX(a->identity_backoff_usec * 2, IDENTITY_RETRY_MIN_USEC),
                                               IDENTITY_RETRY_MAX_USEC);
                log_debug("Cannot learn who kvolumed is from %s (%s), asking again in %.0f s", strempty(credential),
                          strempty(id->message), (double) a->identity_backoff_usec / USEC_PER_SEC);
                r = sd_event_add_time_relative(a->event, &a->identity_retry, CLOCK_MONOTONIC,
                                               a->identity_backoff_usec, 0, on_identity_retry, a);
                if (r < 0)
                        log_warning_errno(r, "Cannot ask the API server who kvolumed is again: %m");
                break;
        }
        start_volumes(a);
}

static int ask_identity(Agent *a) {
        return k8s_identity_request(a->k8s, on_identity, a, &a->identity_request);
}

static bool agent_is_synced(void *userdata) {
        Agent *a = userdata;
        return a->synced;
}

static void agent_refresh_status(void *userdata) {
        Agent *a = userdata;
        if (a->synced && !a->stopping)
                update_status(a);
}

int agent_run(Agent *a) {
        int r;

        log_info("kvolumed " KVOLUMED_BUILD_VERSION " starting for node %s, root-dir %s, API server %s",
                 a->config->node_name, a->config->root_dir, k8s_client_server(a->k8s));
        r = waiting_new(a->event, a->k8s, a->volumes,
                        &(const WaitingHooks){ .synced = agent_is_synced, .refresh_status = agent_refresh_status,
                                               .userdata = a },
                        &a->waiting);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the start-up reports: %m");
        r = sd_event_add_time_relative(a->event, &a->ready_timer, CLOCK_MONOTONIC, START_READY_GRACE_USEC,
                                       USEC_PER_SEC / 10, on_ready_grace, a);
        if (r < 0)
                return log_error_errno(r, "Failed to arm the start's grace timer: %m");
        (void) notify_status("Starting: asking API server %s who kvolumed is", k8s_client_server(a->k8s));
        r = ask_identity(a);
        if (r < 0) {
                log_warning_errno(r, "Cannot ask the API server who kvolumed is: %m");
                start_volumes(a);
        }

        r = sd_event_loop(a->event);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        log_info("kvolumed stopped");
        return r;
}
