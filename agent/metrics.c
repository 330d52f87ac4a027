/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <math.h>

#include "agent/metrics.h"
#include "agent/procmetrics.h"
#include "systemd/log.h"

/* kubelet's buckets for both volume histograms (pkg/volume/util/metrics.go).
 * The bounds are written out as the Go client prints them, so that "le"
 * values match kubelet's byte for byte. */
static const double bucket_bounds[] = { .1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600 };
static const char *const bucket_names[] = { "0.1", "0.25", "0.5", "1",   "2.5", "5",  "10",
                                            "15",  "25",   "50",  "120", "300", "600" };
#define N_BUCKETS ELEMENTSOF(bucket_bounds)
_Static_assert(ELEMENTSOF(bucket_bounds) == ELEMENTSOF(bucket_names), "one name per bucket");

/* client-go's buckets for rest_client_request_duration_seconds
 * (k8s.io/component-base/metrics/prometheus/restclient/metrics.go). */
static const double rest_bucket_bounds[] = { .005, .025, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60 };
static const char *const rest_bucket_names[] = { "0.005", "0.025", "0.1", "0.25", "0.5", "1",
                                                 "2",     "4",     "8",   "15",   "30",  "60" };
_Static_assert(ELEMENTSOF(rest_bucket_bounds) == ELEMENTSOF(rest_bucket_names), "one name per bucket");
_Static_assert(ELEMENTSOF(rest_bucket_bounds) <= N_BUCKETS, "room for the buckets in a Series");

#define MAX_LABELS 4

typedef struct Series {
        char *values[MAX_LABELS];
        uint64_t in_bucket[N_BUCKETS]; /* not cumulative: cumulated when written */
        uint64_t count;
        double sum;
} Series;

typedef struct HistogramVec {
        const char *name;
        const char *help;
        const char *labels[MAX_LABELS];
        size_t n_labels;
        /* NULL: kubelet's volume buckets above. */
        const double *bounds;
        const char *const *bound_names;
        size_t n_bounds;
        Series **series; /* sorted by label values */
        size_t n_series;
} HistogramVec;

/* A family whose samples a collector gives at each scrape. */
typedef struct ScrapedFamily {
        const char *name;
        const char *help;
        const char *type;
        const char *labels[MAX_LABELS];
        size_t n_labels;
} ScrapedFamily;

#define PVC_LABELS { "namespace", "persistentvolumeclaim" }, 2

/* Names, help texts and labels of kubelet's (pkg/kubelet/metrics/collectors/
 * volume_stats.go, pkg/kubelet/volumemanager/metrics), with the stability
 * prefix its registry adds. */
static const ScrapedFamily scraped_families[_METRICS_SCRAPED_MAX] = {
        [METRICS_VOLUME_STATS_AVAILABLE_BYTES] = { "kubelet_volume_stats_available_bytes",
                                                   "[ALPHA] Number of available bytes in the volume", "gauge",
                                                   PVC_LABELS },
        [METRICS_VOLUME_STATS_CAPACITY_BYTES] = { "kubelet_volume_stats_capacity_bytes",
                                                  "[ALPHA] Capacity in bytes of the volume", "gauge", PVC_LABELS },
        [METRICS_VOLUME_STATS_HEALTH_ABNORMAL] = { "kubelet_volume_stats_health_status_abnormal",
                                                   "[ALPHA] Abnormal volume health status. The count is either 1 "
                                                   "or 0. 1 indicates the volume is unhealthy, 0 indicates volume "
                                                   "is healthy",
                                                   "gauge", PVC_LABELS },
        [METRICS_VOLUME_STATS_INODES] = { "kubelet_volume_stats_inodes",
                                          "[ALPHA] Maximum number of inodes in the volume", "gauge", PVC_LABELS },
        [METRICS_VOLUME_STATS_INODES_FREE] = { "kubelet_volume_stats_inodes_free",
                                               "[ALPHA] Number of free inodes in the volume", "gauge", PVC_LABELS },
        [METRICS_VOLUME_STATS_INODES_USED] = { "kubelet_volume_stats_inodes_used",
                                               "[ALPHA] Number of used inodes in the volume", "gauge", PVC_LABELS },
        [METRICS_VOLUME_STATS_USED_BYTES] = { "kubelet_volume_stats_used_bytes",
                                              "[ALPHA] Number of used bytes in the volume", "gauge", PVC_LABELS },
        [METRICS_API_WATCH_RESTARTS] = { "kvolumed_api_watch_restarts_total",
                                         "Watches of the API server started again after the first one, per "
                                         "resource (a watch ends at its timeout, on an error, or with 410 Gone)",
                                         "counter", { "resource" }, 1 },
        [METRICS_CSI_CALLS_IN_FLIGHT] = { "kvolumed_csi_calls_in_flight",
                                          "CSI calls running on each driver's socket now", "gauge",
                                          { "driver_name" }, 1 },
        [METRICS_CSI_CALLS_QUEUED] = { "kvolumed_csi_calls_queued",
                                       "CSI calls waiting for a free slot of their driver now (csi.max-parallel, "
                                       "or the limit of NodeGetVolumeStats calls)",
                                       "gauge", { "driver_name" }, 1 },
        [METRICS_CSI_DRIVER_REGISTERED] = { "kvolumed_csi_driver_registered",
                                            "1 while the CSI driver is registered on the node (or configured in a "
                                            "[driver] section), else 0: each driver known here or wanted by a pod "
                                            "volume on the node",
                                            "gauge", { "driver_name" }, 1 },
        [METRICS_RUNTIME_ERRORS] = { "kvolumed_runtime_errors_total",
                                     "Rounds of CRI calls to the container runtime ([runtime] endpoint) that failed; "
                                     "while it does not answer, no volume is unpublished",
                                     "counter", {}, 0 },
        [METRICS_RUNTIME_UNREACHABLE] = { "kvolumed_runtime_unreachable",
                                          "1 while the container runtime's last answer was an error, else 0",
                                          "gauge", {}, 0 },
        [METRICS_RUNTIME_WAITING_PODS] = { "kvolumed_runtime_waiting_pods",
                                           "Pods whose volumes' unpublish waits for the container runtime (an "
                                           "answer, or their containers to stop)",
                                           "gauge", {}, 0 },
        [METRICS_VOLUMES_FAILED] = { "kvolumed_volumes_failed",
                                     "Failed pod volumes (kvolumed_volumes{state=\"failed\"}) by reason and "
                                     "driver. The tenant's to fix: claim-not-bound, invalid-spec, refused; the "
                                     "node's: driver-missing, csi-error, attach-timeout, attach-limit, "
                                     "source-changed. driver_name is empty without a CSI driver, \"other\" for "
                                     "a name only a pod spec gives",
                                     "gauge", { "driver_name", "reason" }, 2 },
        [METRICS_VOLUMES_OLDEST_UNREADY] = { "kvolumed_volumes_oldest_unready_seconds",
                                             "Seconds since the oldest pod volume not published was first wanted "
                                             "(as kvolumed saw it), 0 when none: owner=\"node\" among the pending "
                                             "ones and those failed for the node's reason, owner=\"tenant\" "
                                             "among those failed for the tenant's",
                                             "gauge", { "owner" }, 1 },
        [METRICS_VOLUME_MANAGER_TOTAL_VOLUMES] = { "volume_manager_total_volumes",
                                                   "[ALPHA] Number of volumes in Volume Manager", "gauge",
                                                   { "plugin_name", "state" }, 2 },
};

typedef struct ScrapedSample {
        char *values[MAX_LABELS];
        double value;
        size_t seq; /* order of arrival: the first of equal label values stays */
        const ScrapedFamily *family;
} ScrapedSample;

struct MetricsScrape {
        ScrapedSample *samples[_METRICS_SCRAPED_MAX];
        size_t n[_METRICS_SCRAPED_MAX];
        size_t seq;
};

struct Metrics {
        double api_last_success; /* unix seconds; 0: none yet */
        bool api_hooked;         /* a request was observed: the gauge is shown */
        HistogramVec csi_operations;
        HistogramVec storage_operations;
        HistogramVec reconcile;
        /* client-go's rest_client_* of the API client; the counter is kept as
         * a HistogramVec whose series' count is the value. */
        HistogramVec rest_requests;
        HistogramVec rest_duration;
        char *version, *commit; /* kvolumed_build_info */
        bool process;           /* process_* families on */
        metrics_volume_stats_t volume_stats;
        void *volume_stats_userdata;
        metrics_collector_t collect;
        void *collect_userdata;
};

static Series *series_free(Series *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < MAX_LABELS; i++)
                free(s->values[i]);
        free(s);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Series *, series_free);

static void histogram_vec_done(HistogramVec *h) {
        for (size_t i = 0; i < h->n_series; i++)
                series_free(h->series[i]);
        free(h->series);
        h->series = NULL;
        h->n_series = 0;
}

static int compare_values(const HistogramVec *h, char *const *a, const char *const *b) {
        for (size_t i = 0; i < h->n_labels; i++) {
                int c = strcmp(a[i], b[i]);
                if (c != 0)
                        return c;
        }
        return 0;
}

/* The series for these label values, created (in order) if new.  Binary
 * search: observations come with every CSI call. */
static int histogram_vec_get(HistogramVec *h, const char *const *values, Series **ret) {
        _cleanup_(series_freep) Series *s = NULL;
        size_t lo = 0, hi = h->n_series;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = compare_values(h, h->series[mid]->values, values);
                if (c == 0) {
                        *ret = h->series[mid];
                        return 0;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        for (size_t i = 0; i < h->n_labels; i++) {
                s->values[i] = strdup(strempty(values[i]));
                if (!s->values[i])
                        return -ENOMEM;
        }
        Series **array = reallocarray(h->series, h->n_series + 1, sizeof *array);
        if (!array)
                return -ENOMEM;
        h->series = array;
        memmove(array + lo + 1, array + lo, (h->n_series - lo) * sizeof *array);
        array[lo] = s;
        h->n_series++;
        *ret = TAKE_PTR(s);
        return 0;
}

static const double *vec_bounds(const HistogramVec *h, size_t *ret_n) {
        *ret_n = h->bounds ? h->n_bounds : N_BUCKETS;
        return h->bounds ?: bucket_bounds;
}

static void series_observe(const HistogramVec *h, Series *s, double seconds) {
        size_t n;
        const double *bounds = vec_bounds(h, &n);

        for (size_t i = 0; i < n; i++)
                if (seconds <= bounds[i]) {
                        s->in_bucket[i]++;
                        break;
                }
        /* Above the last bound it counts only in +Inf, which is _count. */
        s->count++;
        s->sum += seconds;
}

static int histogram_vec_observe(HistogramVec *h, const char *const *values, double seconds) {
        Series *s;
        int r;

        if (!isfinite(seconds) || seconds < 0)
                return -EINVAL;
        r = histogram_vec_get(h, values, &s);
        if (r < 0)
                return r;
        series_observe(h, s, seconds);
        return 0;
}

int metrics_new(Metrics **ret) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        Series *unused;
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        /* Help texts as kubelet's, with the stability prefix its registry adds. */
        m->csi_operations = (HistogramVec){
                .name = "csi_operations_seconds",
                .help = "[ALPHA] Container Storage Interface operation duration with gRPC error code status "
                        "total",
                .labels = { "driver_name", "method_name", "grpc_status_code", "migrated" },
                .n_labels = 4,
        };
        m->storage_operations = (HistogramVec){
                .name = "storage_operation_duration_seconds",
                .help = "[ALPHA] Storage operation duration",
                .labels = { "volume_plugin", "operation_name", "status", "migrated" },
                .n_labels = 4,
        };
        m->reconcile = (HistogramVec){
                .name = "kvolumed_reconcile_seconds",
                .help = "Duration of one reconciler pass of the volume manager, until it has issued its "
                        "operations",
        };
        m->rest_requests = (HistogramVec){
                .name = "rest_client_requests_total",
                .help = "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
                .labels = { "code", "method", "host" },
                .n_labels = 3,
        };
        m->rest_duration = (HistogramVec){
                .name = "rest_client_request_duration_seconds",
                .help = "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
                .labels = { "verb", "host" },
                .n_labels = 2,
                .bounds = rest_bucket_bounds,
                .bound_names = rest_bucket_names,
                .n_bounds = ELEMENTSOF(rest_bucket_bounds),
        };
        /* Without labels there is a single series, shown from the start as the
         * Go client shows a plain histogram. */
        r = histogram_vec_get(&m->reconcile, NULL, &unused);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

Metrics *metrics_free(Metrics *m) {
        if (!m)
                return NULL;
        histogram_vec_done(&m->csi_operations);
        histogram_vec_done(&m->storage_operations);
        histogram_vec_done(&m->reconcile);
        histogram_vec_done(&m->rest_requests);
        histogram_vec_done(&m->rest_duration);
        free(m->version);
        free(m->commit);
        free(m);
        return NULL;
}

int metrics_observe_csi(Metrics *m, const char *driver, const char *method, const char *code, bool migrated,
                        double seconds) {
        if (!m)
                return 0;
        return histogram_vec_observe(&m->csi_operations,
                                     (const char *const[]){ driver, method, code, migrated ? "true" : "false" },
                                     seconds);
}

int metrics_observe_storage(Metrics *m, const char *plugin, const char *operation, bool success, bool migrated,
                            double seconds) {
        if (!m)
                return 0;
        return histogram_vec_observe(&m->storage_operations,
                                     (const char *const[]){ plugin, operation, success ? "success" : "fail-unknown",
                                                            migrated ? "true" : "false" },
                                     seconds);
}

void metrics_observe_reconcile(Metrics *m, double seconds) {
        if (!m || !isfinite(seconds) || seconds < 0)
                return;
        series_observe(&m->reconcile, m->reconcile.series[0], seconds);
}

int metrics_observe_api_request(Metrics *m, const char *method, const char *host, long status, bool watch,
                                double seconds) {
        char code[32];
        Series *s;
        int r;

        if (!m)
                return 0;
        m->api_hooked = true;
        if (status >= 200 && status < 300) {
                struct timespec ts;
                if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
                        m->api_last_success = (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
        }
        /* client-go's label for a request that got no HTTP answer. */
        if (status <= 0)
                strcpy(code, "<error>");
        else
                snprintf(code, sizeof code, "%ld", status);
        r = histogram_vec_get(&m->rest_requests, (const char *const[]){ code, method, host }, &s);
        if (r < 0)
                return r;
        s->count++;
        /* client-go observes no latency for a watch: it lasts as long as the
         * server keeps it, which says nothing of the server's health. */
        if (watch)
                return 0;
        return histogram_vec_observe(&m->rest_duration, (const char *const[]){ method, host }, seconds);
}

void metrics_k8s_hook(const K8sRequestMetrics *req, void *userdata) {
        int r = metrics_observe_api_request(userdata, req->method, req->host, req->status, req->watch,
                                            (double) req->duration_usec / USEC_PER_SEC);
        if (r < 0)
                log_debug_errno(r, "Dropped a rest_client_requests_total observation: %m");
}

int metrics_set_build_info(Metrics *m, const char *version, const char *commit) {
        if (free_and_strdup(&m->version, strempty(version)) < 0 ||
            free_and_strdup(&m->commit, strempty(commit)) < 0)
                return -ENOMEM;
        return 0;
}

void metrics_enable_process(Metrics *m) {
        m->process = true;
}

void metrics_csi_hook(const CsiCallMetrics *call, void *userdata) {
        int r = metrics_observe_csi(userdata, call->driver, call->method, csi_code_name(call->code),
                                    call->migrated, (double) call->duration_usec / USEC_PER_SEC);
        if (r < 0)
                log_debug_errno(r, "Dropped a csi_operations_seconds observation: %m");
}

void metrics_volume_hook(const char *plugin, const char *operation, bool success, bool migrated,
                         uint64_t duration_usec, void *userdata) {
        int r = metrics_observe_storage(userdata, plugin, operation, success, migrated,
                                        (double) duration_usec / USEC_PER_SEC);
        if (r < 0)
                log_debug_errno(r, "Dropped a storage_operation_duration_seconds observation: %m");
}

void metrics_set_volume_stats_source(Metrics *m, metrics_volume_stats_t source, void *userdata) {
        m->volume_stats = source;
        m->volume_stats_userdata = userdata;
}

/* ---- text exposition format 0.0.4 ----------------------------------------- */

/* The shortest text that reads back as the same double, as Go's
 * strconv.FormatFloat(v, 'g', -1, 64) (the exponent threshold differs, which
 * parsers do not mind). */
static const char *format_double(double v, char buf[static 32]) {
        if (isnan(v))
                return "NaN";
        if (isinf(v))
                return v > 0 ? "+Inf" : "-Inf";
        for (int precision = 1; precision <= 17; precision++) {
                snprintf(buf, 32, "%.*g", precision, v);
                if (strtod(buf, NULL) == v)
                        break;
        }
        return buf;
}

/* HELP text escapes backslash and newline; label values also double quotes. */
static void write_escaped(FILE *f, const char *s, bool label_value) {
        for (; *s; s++)
                switch (*s) {
                case '\\':
                        fputs("\\\\", f);
                        break;
                case '\n':
                        fputs("\\n", f);
                        break;
                case '"':
                        fputs(label_value ? "\\\"" : "\"", f);
                        break;
                default:
                        fputc(*s, f);
                }
}

static void write_header(FILE *f, const char *name, const char *help, const char *type) {
        fprintf(f, "# HELP %s ", name);
        write_escaped(f, help, false);
        fprintf(f, "\n# TYPE %s %s\n", name, type);
}

/* "{a="x",b="y",le="0.1"}", or nothing when there is no label at all. */
static void write_labels(FILE *f, const HistogramVec *h, const Series *s, const char *le) {
        if (h->n_labels == 0 && !le)
                return;
        fputc('{', f);
        for (size_t i = 0; i < h->n_labels; i++) {
                fprintf(f, "%s%s=\"", i > 0 ? "," : "", h->labels[i]);
                write_escaped(f, s->values[i], true);
                fputc('"', f);
        }
        if (le)
                fprintf(f, "%sle=\"%s\"", h->n_labels > 0 ? "," : "", le);
        fputc('}', f);
}

static void write_counter_vec(FILE *f, const HistogramVec *h) {
        if (h->n_series == 0)
                return;
        write_header(f, h->name, h->help, "counter");
        for (size_t i = 0; i < h->n_series; i++) {
                fputs(h->name, f);
                write_labels(f, h, h->series[i], NULL);
                fprintf(f, " %" PRIu64 "\n", h->series[i]->count);
        }
}

/* Shown once the API client reports to this registry (the agent's does). */
static void write_api_last_success(FILE *f, const Metrics *m) {
        char buf[32];

        if (!m->api_hooked)
                return;
        write_header(f, "kvolumed_api_last_success_timestamp_seconds",
                     "Unix time of the last request the API server answered with a 2xx status (0: none since "
                     "kvolumed started)",
                     "gauge");
        fprintf(f, "kvolumed_api_last_success_timestamp_seconds %s\n", format_double(m->api_last_success, buf));
}

static void write_build_info(FILE *f, const Metrics *m) {
        if (!m->version)
                return;
        /* As kubernetes_build_info: a constant 1 whose labels are the facts. */
        write_header(f, "kvolumed_build_info",
                     "A metric with a constant '1' value labeled by the version and git commit kvolumed was "
                     "built from",
                     "gauge");
        fputs("kvolumed_build_info{commit=\"", f);
        write_escaped(f, m->commit, true);
        fputs("\",version=\"", f);
        write_escaped(f, m->version, true);
        fputs("\"} 1\n", f);
}

static void write_histogram_vec(FILE *f, const HistogramVec *h) {
        const char *const *names = h->bound_names ?: bucket_names;
        size_t n_bounds;
        char buf[32];

        (void) vec_bounds(h, &n_bounds);
        if (h->n_series == 0)
                return;
        write_header(f, h->name, h->help, "histogram");
        for (size_t i = 0; i < h->n_series; i++) {
                const Series *s = h->series[i];
                uint64_t cumulative = 0;

                for (size_t b = 0; b < n_bounds; b++) {
                        cumulative += s->in_bucket[b];
                        fprintf(f, "%s_bucket", h->name);
                        write_labels(f, h, s, names[b]);
                        fprintf(f, " %" PRIu64 "\n", cumulative);
                }
                fprintf(f, "%s_bucket", h->name);
                write_labels(f, h, s, "+Inf");
                fprintf(f, " %" PRIu64 "\n", s->count);
                fprintf(f, "%s_sum", h->name);
                write_labels(f, h, s, NULL);
                fprintf(f, " %s\n", format_double(s->sum, buf));
                fprintf(f, "%s_count", h->name);
                write_labels(f, h, s, NULL);
                fprintf(f, " %" PRIu64 "\n", s->count);
        }
}

static void write_volumes_gauge(FILE *f, const Metrics *m) {
        VolumeManagerStats st = {};

        if (!m->volume_stats)
                return;
        m->volume_stats(&st, m->volume_stats_userdata);
        /* Per volume (not per pod), sorted by condition; one volume may be in several. */
        const struct {
                const char *condition;
                unsigned value;
        } conditions[] = {
                { "failing", st.failing },           { "staged", st.staged },
                { "uncertain", st.uncertain },       { "unresponsive", st.unresponsive },
                { "waiting-for-attach", st.attach_waiting },
        };
        write_header(f, "kvolumed_volume_conditions",
                     "Volumes on the node (one per volume, not per pod; a volume may be in several): staged, "
                     "uncertain (a stage or publish that may or may not be there), failing (an operation waits "
                     "to be retried), unresponsive (its file system does not answer), waiting-for-attach",
                     "gauge");
        for (size_t i = 0; i < ELEMENTSOF(conditions); i++)
                fprintf(f, "kvolumed_volume_conditions{condition=\"%s\"} %u\n", conditions[i].condition,
                        conditions[i].value);

        /* Every pod volume in exactly one state: the states of the volumes
         * pods want add up to kvolumed_volumes_desired. */
        write_header(f, "kvolumed_volumes",
                     "Pod volumes by state, each in exactly one: published, pending (on its way), failed (not "
                     "published and something failed: claim not bound, driver not registered, lifecycle mode "
                     "refused, CSI call failed), tearing-down (published for a pod that no longer wants it)",
                     "gauge");
        const PodVolumeState order[] = { POD_VOLUME_FAILED, POD_VOLUME_PENDING, POD_VOLUME_PUBLISHED,
                                         POD_VOLUME_TEARING_DOWN };
        for (size_t i = 0; i < ELEMENTSOF(order); i++)
                fprintf(f, "kvolumed_volumes{state=\"%s\"} %u\n", pod_volume_state_to_string(order[i]),
                        st.by_state[order[i]]);
        write_header(f, "kvolumed_volumes_desired", "Pod volumes the pods on the node want", "gauge");
        fprintf(f, "kvolumed_volumes_desired %u\n", st.desired);
}

/* ---- values read at scrape time --------------------------------------------- */

void metrics_set_collector(Metrics *m, metrics_collector_t collect, void *userdata) {
        m->collect = collect;
        m->collect_userdata = userdata;
}

int metrics_scrape_add(MetricsScrape *s, MetricsScraped family, const char *const *values, double value) {
        const ScrapedFamily *fam;
        ScrapedSample *array, *x;

        if (!s || family < 0 || family >= _METRICS_SCRAPED_MAX)
                return -EINVAL;
        fam = &scraped_families[family];
        array = reallocarray(s->samples[family], s->n[family] + 1, sizeof *array);
        if (!array)
                return -ENOMEM;
        s->samples[family] = array;
        x = &array[s->n[family]];
        *x = (ScrapedSample){ .value = value, .seq = s->seq++, .family = fam };
        for (size_t i = 0; i < fam->n_labels; i++) {
                x->values[i] = strdup(strempty(values ? values[i] : NULL));
                if (!x->values[i]) {
                        for (size_t j = 0; j < i; j++)
                                free(x->values[j]);
                        return -ENOMEM;
                }
        }
        s->n[family]++;
        return 0;
}

static void scrape_done(MetricsScrape *s) {
        for (size_t f = 0; f < _METRICS_SCRAPED_MAX; f++) {
                for (size_t i = 0; i < s->n[f]; i++)
                        for (size_t l = 0; l < MAX_LABELS; l++)
                                free(s->samples[f][i].values[l]);
                free(s->samples[f]);
        }
}

static int compare_label_values(const ScrapedSample *x, const ScrapedSample *y) {
        for (size_t i = 0; i < x->family->n_labels; i++) {
                int c = strcmp(x->values[i], y->values[i]);
                if (c != 0)
                        return c;
        }
        return 0;
}

static int compare_scraped(const void *a, const void *b) {
        const ScrapedSample *x = a, *y = b;
        int c = compare_label_values(x, y);
        return c != 0 ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static void write_scraped(FILE *f, MetricsScrape *s, MetricsScraped family) {
        const ScrapedFamily *fam = &scraped_families[family];
        ScrapedSample *samples = s->samples[family];
        char buf[32];

        if (s->n[family] == 0)
                return;
        qsort(samples, s->n[family], sizeof *samples, compare_scraped);
        write_header(f, fam->name, fam->help, fam->type);
        for (size_t i = 0; i < s->n[family]; i++) {
                if (i > 0 && compare_label_values(&samples[i], &samples[i - 1]) == 0)
                        continue;
                fputs(fam->name, f);
                if (fam->n_labels > 0) {
                        fputc('{', f);
                        for (size_t l = 0; l < fam->n_labels; l++) {
                                fprintf(f, "%s%s=\"", l > 0 ? "," : "", fam->labels[l]);
                                write_escaped(f, samples[i].values[l], true);
                                fputc('"', f);
                        }
                        fputc('}', f);
                }
                fprintf(f, " %s\n", format_double(samples[i].value, buf));
        }
}

int metrics_write(Metrics *m, FILE *f) {
        MetricsScrape s = {};

        if (m->collect)
                m->collect(&s, m->collect_userdata);
        /* Families by name: csi_..., kubelet_volume_stats_..., kvolumed_api_...,
         * kvolumed_csi_..., kvolumed_reconcile_..., kvolumed_volumes,
         * storage_..., volume_manager_... */
        write_histogram_vec(f, &m->csi_operations);
        for (MetricsScraped i = METRICS_VOLUME_STATS_AVAILABLE_BYTES; i <= METRICS_VOLUME_STATS_USED_BYTES; i++)
                write_scraped(f, &s, i);
        write_api_last_success(f, m);
        write_scraped(f, &s, METRICS_API_WATCH_RESTARTS);
        write_build_info(f, m);
        for (MetricsScraped i = METRICS_CSI_CALLS_IN_FLIGHT; i <= METRICS_CSI_DRIVER_REGISTERED; i++)
                write_scraped(f, &s, i);
        write_histogram_vec(f, &m->reconcile);
        for (MetricsScraped i = METRICS_RUNTIME_ERRORS; i <= METRICS_RUNTIME_WAITING_PODS; i++)
                write_scraped(f, &s, i);
        write_volumes_gauge(f, m);
        write_scraped(f, &s, METRICS_VOLUMES_FAILED);
        write_scraped(f, &s, METRICS_VOLUMES_OLDEST_UNREADY);
        if (m->process)
                process_metrics_write(f);
        write_histogram_vec(f, &m->rest_duration);
        write_counter_vec(f, &m->rest_requests);
        write_histogram_vec(f, &m->storage_operations);
        write_scraped(f, &s, METRICS_VOLUME_MANAGER_TOTAL_VOLUMES);
        scrape_done(&s);
        if (fflush(f) != 0 || ferror(f))
                return errno > 0 ? -errno : -EIO;
        return 0;
}
