/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus registry: exact exposition text, escaping, cumulative
 * buckets, series order, and the hook adapters. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "agent/metrics.h"
#include "agent/procmetrics.h"

/* The exposition of m, as a string the caller frees. */
/* Not inlined: GCC 12 at -O3 takes the memstream's buffer for a pointer
 * to render()'s own local and warns of a dangling pointer (-Werror). */
static __attribute__((noinline)) char *render(Metrics *m) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        assert_non_null(f);
        assert_int_equal(metrics_write(m, f), 0);
        assert_int_equal(fclose(f), 0);
        return text;
}

/* The lines of text that start with prefix, joined with "\n". */
static char *grep(const char *text, const char *prefix) {
        char *out = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&out, &size);
        assert_non_null(f);
        for (const char *line = text; *line;) {
                const char *end = strchrnul(line, '\n');
                if (strncmp(line, prefix, strlen(prefix)) == 0)
                        fprintf(f, "%.*s\n", (int) (end - line), line);
                line = *end ? end + 1 : end;
        }
        assert_int_equal(fclose(f), 0);
        return out;
}

static const char reconcile_empty[] =
        "# HELP kvolumed_reconcile_seconds Duration of one reconciler pass of the volume manager, until it has "
        "issued its operations\n"
        "# TYPE kvolumed_reconcile_seconds histogram\n"
        "kvolumed_reconcile_seconds_bucket{le=\"0.1\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"0.25\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"0.5\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"1\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"2.5\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"5\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"10\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"15\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"25\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"50\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"120\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"300\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"600\"} 0\n"
        "kvolumed_reconcile_seconds_bucket{le=\"+Inf\"} 0\n"
        "kvolumed_reconcile_seconds_sum 0\n"
        "kvolumed_reconcile_seconds_count 0\n";

static void test_empty_registry(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL;

        assert_int_equal(metrics_new(&m), 0);
        text = render(m);
        /* Labelled families without a series and the gauge without a source
         * are left out, as the Go client leaves out an empty vector. */
        assert_string_equal(text, reconcile_empty);
}

#define CSI_LABELS                                                                                          \
        "driver_name=\"d\",method_name=\"/csi.v1.Node/NodePublishVolume\",grpc_status_code=\"OK\","           \
        "migrated=\"false\""
#define ST_LABELS                                                                                           \
        "volume_plugin=\"kubernetes.io/csi:d\",operation_name=\"volume_mount\",status=\"fail-unknown\","     \
        "migrated=\"false\""

static void test_small_registry_exact(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL;

        assert_int_equal(metrics_new(&m), 0);
        assert_int_equal(metrics_observe_csi(m, "d", "/csi.v1.Node/NodePublishVolume", "OK", false, 0.3), 0);
        assert_int_equal(metrics_observe_csi(m, "d", "/csi.v1.Node/NodePublishVolume", "OK", false, 0.1), 0);
        assert_int_equal(metrics_observe_csi(m, "d", "/csi.v1.Node/NodePublishVolume", "OK", false, 700), 0);
        assert_int_equal(metrics_observe_storage(m, "kubernetes.io/csi:d", "volume_mount", false, false, 12), 0);
        metrics_observe_reconcile(m, 0.002);
        metrics_observe_reconcile(m, 3);
        text = render(m);
        assert_string_equal(
                text,
                "# HELP csi_operations_seconds [ALPHA] Container Storage Interface operation duration with gRPC "
                "error code status total\n"
                "# TYPE csi_operations_seconds histogram\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"0.1\"} 1\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"0.25\"} 1\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"0.5\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"1\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"2.5\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"5\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"10\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"15\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"25\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"50\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"120\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"300\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"600\"} 2\n"
                "csi_operations_seconds_bucket{" CSI_LABELS ",le=\"+Inf\"} 3\n"
                "csi_operations_seconds_sum{" CSI_LABELS "} 700.4\n"
                "csi_operations_seconds_count{" CSI_LABELS "} 3\n"
                "# HELP kvolumed_reconcile_seconds Duration of one reconciler pass of the volume manager, until "
                "it has issued its operations\n"
                "# TYPE kvolumed_reconcile_seconds histogram\n"
                "kvolumed_reconcile_seconds_bucket{le=\"0.1\"} 1\n"
                "kvolumed_reconcile_seconds_bucket{le=\"0.25\"} 1\n"
                "kvolumed_reconcile_seconds_bucket{le=\"0.5\"} 1\n"
                "kvolumed_reconcile_seconds_bucket{le=\"1\"} 1\n"
                "kvolumed_reconcile_seconds_bucket{le=\"2.5\"} 1\n"
                "kvolumed_reconcile_seconds_bucket{le=\"5\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"10\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"15\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"25\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"50\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"120\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"300\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"600\"} 2\n"
                "kvolumed_reconcile_seconds_bucket{le=\"+Inf\"} 2\n"
                "kvolumed_reconcile_seconds_sum 3.002\n"
                "kvolumed_reconcile_seconds_count 2\n"
                "# HELP storage_operation_duration_seconds [ALPHA] Storage operation duration\n"
                "# TYPE storage_operation_duration_seconds histogram\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"0.1\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"0.25\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"0.5\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"1\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"2.5\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"5\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"10\"} 0\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"15\"} 1\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"25\"} 1\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"50\"} 1\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"120\"} 1\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"300\"} 1\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"600\"} 1\n"
                "storage_operation_duration_seconds_bucket{" ST_LABELS ",le=\"+Inf\"} 1\n"
                "storage_operation_duration_seconds_sum{" ST_LABELS "} 12\n"
                "storage_operation_duration_seconds_count{" ST_LABELS "} 1\n"
        );
}

static void test_bucket_bounds_inclusive(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *buckets = NULL;
        /* One observation exactly on each bound, one just above the last. */
        static const double bounds[] = { .1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600 };

        assert_int_equal(metrics_new(&m), 0);
        for (size_t i = 0; i < ELEMENTSOF(bounds); i++)
                metrics_observe_reconcile(m, bounds[i]);
        metrics_observe_reconcile(m, 600.000001);
        metrics_observe_reconcile(m, 0);
        text = render(m);
        buckets = grep(text, "kvolumed_reconcile_seconds_bucket");
        assert_string_equal(buckets,
                            "kvolumed_reconcile_seconds_bucket{le=\"0.1\"} 2\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"0.25\"} 3\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"0.5\"} 4\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"1\"} 5\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"2.5\"} 6\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"5\"} 7\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"10\"} 8\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"15\"} 9\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"25\"} 10\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"50\"} 11\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"120\"} 12\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"300\"} 13\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"600\"} 14\n"
                            "kvolumed_reconcile_seconds_bucket{le=\"+Inf\"} 15\n");
        assert_non_null(strstr(text, "kvolumed_reconcile_seconds_count 15\n"));
}

static void test_label_escaping(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *count = NULL;

        assert_int_equal(metrics_new(&m), 0);
        assert_int_equal(metrics_observe_csi(m, "a\"b\\c\nd", "/m", "Unknown", false, 1), 0);
        text = render(m);
        count = grep(text, "csi_operations_seconds_count");
        assert_string_equal(count, "csi_operations_seconds_count{driver_name=\"a\\\"b\\\\c\\nd\",method_name=\"/m\","
                                   "grpc_status_code=\"Unknown\",migrated=\"false\"} 1\n");
        /* Every sample line stays one line. */
        assert_null(strstr(text, "c\nd"));
}

static void test_series_order(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *counts = NULL;

        assert_int_equal(metrics_new(&m), 0);
        /* Observed in an order unrelated to the output's. */
        assert_int_equal(metrics_observe_storage(m, "kubernetes.io/csi:b", "volume_unmount", true, false, 1), 0);
        assert_int_equal(metrics_observe_storage(m, "kubernetes.io/csi:a", "volume_mount", false, false, 1), 0);
        assert_int_equal(metrics_observe_storage(m, "kubernetes.io/csi:b", "volume_mount", true, false, 1), 0);
        assert_int_equal(metrics_observe_storage(m, "kubernetes.io/csi:a", "volume_mount", true, false, 1), 0);
        assert_int_equal(metrics_observe_storage(m, "kubernetes.io/csi:a", "volume_mount", true, false, 2), 0);
        text = render(m);
        counts = grep(text, "storage_operation_duration_seconds_count");
        assert_string_equal(
                counts,
                "storage_operation_duration_seconds_count{volume_plugin=\"kubernetes.io/csi:a\",operation_name="
                "\"volume_mount\",status=\"fail-unknown\",migrated=\"false\"} 1\n"
                "storage_operation_duration_seconds_count{volume_plugin=\"kubernetes.io/csi:a\",operation_name="
                "\"volume_mount\",status=\"success\",migrated=\"false\"} 2\n"
                "storage_operation_duration_seconds_count{volume_plugin=\"kubernetes.io/csi:b\",operation_name="
                "\"volume_mount\",status=\"success\",migrated=\"false\"} 1\n"
                "storage_operation_duration_seconds_count{volume_plugin=\"kubernetes.io/csi:b\",operation_name="
                "\"volume_unmount\",status=\"success\",migrated=\"false\"} 1\n");
        /* Same registry, same text. */
        _cleanup_free_ char *again = render(m);
        assert_string_equal(text, again);
}

static void fake_stats(VolumeManagerStats *ret, void *userdata) {
        unsigned *calls = userdata;
        (*calls)++;
        *ret = (VolumeManagerStats){
                .pods = 9, .desired = 5, .waiting = 1, .published = 3,
                .uncertain = 2, .staged = 4, .running = 7, .failing = 6, .unresponsive = 8,
                .attach_waiting = 10,
                .by_state = { [POD_VOLUME_FAILED] = 1, [POD_VOLUME_PENDING] = 2, [POD_VOLUME_PUBLISHED] = 2,
                              [POD_VOLUME_TEARING_DOWN] = 1 },
        };
}

static void test_volumes_gauge(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *gauge = NULL;
        unsigned calls = 0;

        assert_int_equal(metrics_new(&m), 0);
        metrics_set_volume_stats_source(m, fake_stats, &calls);
        text = render(m);
        assert_int_equal(calls, 1); /* read at scrape time */
        gauge = grep(text, "kvolumed_volume");
        assert_string_equal(gauge, "kvolumed_volume_conditions{condition=\"failing\"} 6\n"
                                   "kvolumed_volume_conditions{condition=\"staged\"} 4\n"
                                   "kvolumed_volume_conditions{condition=\"uncertain\"} 2\n"
                                   "kvolumed_volume_conditions{condition=\"unresponsive\"} 8\n"
                                   "kvolumed_volume_conditions{condition=\"waiting-for-attach\"} 10\n"
                                   "kvolumed_volumes{state=\"failed\"} 1\n"
                                   "kvolumed_volumes{state=\"pending\"} 2\n"
                                   "kvolumed_volumes{state=\"published\"} 2\n"
                                   "kvolumed_volumes{state=\"tearing-down\"} 1\n"
                                   "kvolumed_volumes_desired 5\n");
        assert_non_null(strstr(text, "# TYPE kvolumed_volumes gauge\n"));
        /* Between the reconcile histogram and storage_..., by name. */
        assert_true(strstr(text, "# TYPE kvolumed_reconcile_seconds") <
                    strstr(text, "# TYPE kvolumed_volumes"));

        metrics_set_volume_stats_source(m, NULL, NULL);
        free(text);
        text = render(m);
        assert_null(strstr(text, "kvolumed_volumes"));
}

static void test_hooks(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *csi = NULL, *storage = NULL;

        assert_int_equal(metrics_new(&m), 0);
        metrics_csi_hook(&(CsiCallMetrics){ .driver = "d",
                                            .method = "/csi.v1.Node/NodeStageVolume",
                                            .code = CSI_CODE_DEADLINE_EXCEEDED,
                                            .duration_usec = 1500000 },
                         m);
        metrics_volume_hook("kubernetes.io/csi:d", "mount_device", true, false, 250000, m);
        text = render(m);
        csi = grep(text, "csi_operations_seconds_sum");
        assert_string_equal(csi, "csi_operations_seconds_sum{driver_name=\"d\",method_name=\"/csi.v1.Node/"
                                 "NodeStageVolume\",grpc_status_code=\"DeadlineExceeded\",migrated=\"false\"} 1.5\n");
        storage = grep(text, "storage_operation_duration_seconds_bucket{volume_plugin=\"kubernetes.io/csi:d\","
                             "operation_name=\"mount_device\",status=\"success\",migrated=\"false\",le=\"0.25\"}");
        assert_string_equal(storage, "storage_operation_duration_seconds_bucket{volume_plugin=\"kubernetes.io/csi:d\","
                                     "operation_name=\"mount_device\",status=\"success\",migrated=\"false\","
                                     "le=\"0.25\"} 1\n");
}

/* A volume CSI migration serves: both families say migrated="true". */
static void test_hooks_migrated(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *csi = NULL, *storage = NULL;

        assert_int_equal(metrics_new(&m), 0);
        metrics_csi_hook(&(CsiCallMetrics){ .driver = "ebs.csi.aws.com",
                                            .method = "/csi.v1.Node/NodePublishVolume",
                                            .code = CSI_CODE_OK,
                                            .migrated = true,
                                            .duration_usec = 500000 },
                         m);
        metrics_volume_hook("kubernetes.io/csi:ebs.csi.aws.com", "volume_mount", true, true, 500000, m);
        text = render(m);
        csi = grep(text, "csi_operations_seconds_count");
        assert_string_equal(csi, "csi_operations_seconds_count{driver_name=\"ebs.csi.aws.com\",method_name=\"/csi.v1."
                                 "Node/NodePublishVolume\",grpc_status_code=\"OK\",migrated=\"true\"} 1\n");
        storage = grep(text, "storage_operation_duration_seconds_count");
        assert_string_equal(storage, "storage_operation_duration_seconds_count{volume_plugin=\"kubernetes.io/csi:"
                                     "ebs.csi.aws.com\",operation_name=\"volume_mount\",status=\"success\","
                                     "migrated=\"true\"} 1\n");
}

static void test_invalid_observations(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL;

        /* No registry: metrics are off, nothing fails. */
        assert_int_equal(metrics_observe_csi(NULL, "d", "/m", "OK", false, 1), 0);
        assert_int_equal(metrics_observe_storage(NULL, "p", "o", true, false, 1), 0);
        metrics_observe_reconcile(NULL, 1);

        assert_int_equal(metrics_new(&m), 0);
        assert_int_equal(metrics_observe_csi(m, "d", "/m", "OK", false, NAN), -EINVAL);
        assert_int_equal(metrics_observe_csi(m, "d", "/m", "OK", false, -1), -EINVAL);
        assert_int_equal(metrics_observe_storage(m, "p", "o", true, false, INFINITY), -EINVAL);
        metrics_observe_reconcile(m, NAN);
        metrics_observe_reconcile(m, -0.5);
        text = render(m);
        assert_string_equal(text, reconcile_empty);
}

static void test_many_series(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL;
        char driver[32];

        assert_int_equal(metrics_new(&m), 0);
        /* Interleaved inserts exercise the sorted insertion. */
        for (int i = 0; i < 200; i++) {
                snprintf(driver, sizeof driver, "d%03d", (i * 37) % 200);
                assert_int_equal(metrics_observe_csi(m, driver, "/m", "OK", false, 0.01), 0);
                assert_int_equal(metrics_observe_csi(m, driver, "/m", "OK", false, 0.01), 0);
        }
        text = render(m);
        const char *prev = text;
        for (int i = 0; i < 200; i++) {
                char want[160];
                snprintf(want, sizeof want,
                         "csi_operations_seconds_count{driver_name=\"d%03d\",method_name=\"/m\","
                         "grpc_status_code=\"OK\",migrated=\"false\"} 2\n",
                         i);
                const char *at = strstr(text, want);
                assert_non_null(at);
                assert_true(at >= prev);
                prev = at;
        }
}

static void collect_fake(MetricsScrape *s, void *userdata) {
        unsigned *calls = userdata;
        (*calls)++;
        /* Out of order, a repeat, and a value to escape. */
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUME_STATS_CAPACITY_BYTES,
                                            (const char *const[]){ "ns-b", "claim" }, 2048), 0);
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUME_STATS_CAPACITY_BYTES,
                                            (const char *const[]){ "ns-a", "c\"q" }, 67108864), 0);
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUME_STATS_CAPACITY_BYTES,
                                            (const char *const[]){ "ns-b", "claim" }, 1), 0);
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUME_MANAGER_TOTAL_VOLUMES,
                                            (const char *const[]){ "kubernetes.io/csi:d", "desired_state_of_world" },
                                            3), 0);
        assert_int_equal(metrics_scrape_add(s, METRICS_API_WATCH_RESTARTS, (const char *const[]){ "pods" }, 0), 0);
        assert_int_equal(metrics_scrape_add(s, METRICS_CSI_CALLS_IN_FLIGHT, (const char *const[]){ "d" }, 2), 0);
        /* What an operator alerts on (agent.c gives them). */
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUMES_FAILED, (const char *const[]){ "d", "csi-error" }, 2),
                         0);
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUMES_FAILED,
                                            (const char *const[]){ "", "claim-not-bound" }, 1), 0);
        assert_int_equal(metrics_scrape_add(s, METRICS_VOLUMES_OLDEST_UNREADY, (const char *const[]){ "node" }, 42.5),
                         0);
        assert_int_equal(metrics_scrape_add(s, METRICS_CSI_DRIVER_REGISTERED, (const char *const[]){ "d" }, 0), 0);
        assert_int_equal(metrics_scrape_add(s, _METRICS_SCRAPED_MAX, NULL, 1), -EINVAL);
}

/* The value of kvolumed_api_last_success_timestamp_seconds in a scrape. */
static double last_success(const char *text) {
        const char *line = strstr(text, "\nkvolumed_api_last_success_timestamp_seconds ");

        if (!line)
                fail_msg("no kvolumed_api_last_success_timestamp_seconds in the scrape");
        return strtod(line + strlen("\nkvolumed_api_last_success_timestamp_seconds "), NULL);
}

/* client-go's families: requests by code (a transport error as "<error>"),
 * method and host; latency with client-go's buckets, none for a watch. */
static void test_api_requests(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *total = NULL, *dur = NULL;

        assert_int_equal(metrics_new(&m), 0);
        assert_int_equal(metrics_set_build_info(m, "0.1.0", "abc"), 0);
        /* Before any 2xx answer: 0; then the time of the last one. */
        assert_int_equal(metrics_observe_api_request(m, "GET", "h:6443", 0, false, 10), 0);
        text = render(m);
        assert_non_null(strstr(text, "# TYPE kvolumed_api_last_success_timestamp_seconds gauge\n"
                                     "kvolumed_api_last_success_timestamp_seconds 0\n"));
        free(text);
        double before = (double) time(NULL);
        assert_int_equal(metrics_observe_api_request(m, "GET", "h:6443", 200, false, 0.02), 0);
        text = render(m);
        double at = last_success(text);
        assert_true(at >= before && at <= (double) time(NULL) + 1);
        assert_true(strstr(text, "# TYPE kvolumed_api_last_success") < strstr(text, "# TYPE kvolumed_build_info"));
        free(text);
        /* The rest as before: one transport error fewer below. */
        assert_int_equal(metrics_observe_api_request(m, "PATCH", "h:6443", 409, false, 0.001), 0);
        text = render(m);
        assert_true(last_success(text) == at);
        free(text);
        metrics_free(m);
        assert_int_equal(metrics_new(&m), 0);
        assert_int_equal(metrics_set_build_info(m, "0.1.0", "abc"), 0);
        assert_int_equal(metrics_observe_api_request(m, "GET", "h:6443", 200, false, 0.02), 0);
        assert_int_equal(metrics_observe_api_request(m, "GET", "h:6443", 0, false, 10), 0);
        assert_int_equal(metrics_observe_api_request(m, "GET", "h:6443", 0, true, 0), 0);
        assert_int_equal(metrics_observe_api_request(m, "PATCH", "h:6443", 409, false, 0.001), 0);
        text = render(m);
        total = grep(text, "rest_client_requests_total");
        assert_string_equal(total, "rest_client_requests_total{code=\"200\",method=\"GET\",host=\"h:6443\"} 1\n"
                                   "rest_client_requests_total{code=\"409\",method=\"PATCH\",host=\"h:6443\"} 1\n"
                                   "rest_client_requests_total{code=\"<error>\",method=\"GET\",host=\"h:6443\"} 2\n");
        dur = grep(text, "rest_client_request_duration_seconds_bucket{verb=\"GET\"");
        assert_string_equal(dur,
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"0.005\"} 0\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"0.025\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"0.1\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"0.25\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"0.5\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"1\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"2\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"4\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"8\"} 1\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"15\"} 2\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"30\"} 2\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"60\"} 2\n"
                            "rest_client_request_duration_seconds_bucket{verb=\"GET\",host=\"h:6443\",le=\"+Inf\"} 2\n");
        assert_non_null(strstr(text, "# TYPE rest_client_requests_total counter\n"));
        assert_non_null(strstr(text, "kvolumed_build_info{commit=\"abc\",version=\"0.1.0\"} 1\n"));
        /* Families sorted by name, as the Go client writes them. */
        assert_true(strstr(text, "# TYPE kvolumed_build_info") < strstr(text, "# TYPE kvolumed_reconcile"));
        assert_true(strstr(text, "# TYPE rest_client_request_duration") < strstr(text, "# TYPE rest_client_requests"));
        assert_null(strstr(text, "process_"));
}

static void test_process_stat(void **state) {
        ProcessSample s;
        /* A command name with a space and a ')' in it. */
        const char stat[] = "42 (kvol) umed) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 1 0 500 "
                            "104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";

        assert_int_equal(process_parse_stat(stat, 1000, 100, 4096, &s), 0);
        assert_true(s.cpu_seconds == 4.0);
        assert_true(s.start_time == 1005.0);
        assert_true(s.virtual_bytes == 104857600.0);
        assert_true(s.resident_bytes == 2560.0 * 4096);
        assert_int_equal(process_parse_stat("42 no paren", 1000, 100, 4096, &s), -EINVAL);
        assert_int_equal(process_parse_stat("42 (x) S 1", 1000, 100, 4096, &s), -EINVAL);
        assert_int_equal(process_sample_read(&s), 0);
        assert_true(s.open_fds >= 3 && s.max_fds > 0 && s.resident_bytes > 0);
}

static void test_scraped_families(void **state) {
        _cleanup_(metrics_freep) Metrics *m = NULL;
        _cleanup_free_ char *text = NULL, *capacity = NULL;
        unsigned calls = 0;

        assert_int_equal(metrics_new(&m), 0);
        metrics_set_collector(m, collect_fake, &calls);
        text = render(m);
        assert_int_equal(calls, 1); /* read at scrape time */
        /* Sorted by label values; the first of a repeat stays. */
        capacity = grep(text, "kubelet_volume_stats_capacity_bytes");
        assert_string_equal(capacity,
                            "kubelet_volume_stats_capacity_bytes{namespace=\"ns-a\",persistentvolumeclaim=\"c\\\"q\"} "
                            "67108864\n"
                            "kubelet_volume_stats_capacity_bytes{namespace=\"ns-b\",persistentvolumeclaim=\"claim\"} "
                            "2048\n");
        assert_non_null(strstr(text, "# HELP kubelet_volume_stats_capacity_bytes [ALPHA] Capacity in bytes of the "
                                     "volume\n# TYPE kubelet_volume_stats_capacity_bytes gauge\n"));
        assert_non_null(strstr(text, "# TYPE kvolumed_api_watch_restarts_total counter\n"
                                     "kvolumed_api_watch_restarts_total{resource=\"pods\"} 0\n"));
        assert_non_null(strstr(text, "kvolumed_csi_calls_in_flight{driver_name=\"d\"} 2\n"));
        assert_non_null(strstr(text, "# HELP volume_manager_total_volumes [ALPHA] Number of volumes in Volume "
                                     "Manager\n# TYPE volume_manager_total_volumes gauge\n"
                                     "volume_manager_total_volumes{plugin_name=\"kubernetes.io/csi:d\","
                                     "state=\"desired_state_of_world\"} 3\n"));
        /* Families without a sample are left out. */
        assert_null(strstr(text, "kubelet_volume_stats_used_bytes"));
        assert_null(strstr(text, "kvolumed_csi_calls_queued"));
        assert_non_null(strstr(text, "# TYPE kvolumed_volumes_failed gauge\n"
                                     "kvolumed_volumes_failed{driver_name=\"\",reason=\"claim-not-bound\"} 1\n"
                                     "kvolumed_volumes_failed{driver_name=\"d\",reason=\"csi-error\"} 2\n"));
        assert_non_null(strstr(text, "# TYPE kvolumed_volumes_oldest_unready_seconds gauge\n"
                                     "kvolumed_volumes_oldest_unready_seconds{owner=\"node\"} 42.5\n"));
        assert_non_null(strstr(text, "# TYPE kvolumed_csi_driver_registered gauge\n"
                                     "kvolumed_csi_driver_registered{driver_name=\"d\"} 0\n"));
        /* No request observed: no API gauge. */
        assert_null(strstr(text, "kvolumed_api_last_success"));
        /* Families in name order, as the Go client writes them. */
        const char *order[] = { "# TYPE kubelet_volume_stats_capacity_bytes", "# TYPE kvolumed_api_watch_restarts_total",
                                "# TYPE kvolumed_csi_calls_in_flight", "# TYPE kvolumed_csi_driver_registered",
                                "# TYPE kvolumed_reconcile_seconds", "# TYPE kvolumed_volumes_failed",
                                "# TYPE kvolumed_volumes_oldest_unready_seconds", "# TYPE volume_manager_total_volumes" };
        for (size_t i = 1; i < ELEMENTSOF(order); i++)
                assert_true(strstr(text, order[i - 1]) < strstr(text, order[i]));

        metrics_set_collector(m, NULL, NULL);
        free(text);
        text = render(m);
        assert_string_equal(text, reconcile_empty);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_empty_registry),
                cmocka_unit_test(test_small_registry_exact),
                cmocka_unit_test(test_bucket_bounds_inclusive),
                cmocka_unit_test(test_label_escaping),
                cmocka_unit_test(test_series_order),
                cmocka_unit_test(test_volumes_gauge),
                cmocka_unit_test(test_hooks),
                cmocka_unit_test(test_hooks_migrated),
                cmocka_unit_test(test_invalid_observations),
                cmocka_unit_test(test_many_series),
                cmocka_unit_test(test_scraped_families),
                cmocka_unit_test(test_api_requests),
                cmocka_unit_test(test_process_stat),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
