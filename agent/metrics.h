/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The agent's Prometheus registry: kubelet's two volume histograms
 * (csi_operations_seconds, storage_operation_duration_seconds, names, labels
 * and buckets as kubelet's, see DESIGN.md §2) plus kvolumed_reconcile_seconds
 * and the kvolumed_volumes gauge; and the families read at scrape time from
 * a collector (kubelet's volume stats and volume_manager_total_volumes,
 * kvolumed's watch restarts and CSI calls in flight).  One Metrics object,
 * owned by the agent; everything runs on the event loop, so nothing is
 * locked.
 *
 * metrics_write() renders text exposition format 0.0.4 in the order of
 * Prometheus' Go client: families sorted by name, series sorted by label
 * values.  A labelled histogram appears once it has a series; the reconcile
 * histogram always appears; the gauge appears once a stats source is set. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "csi/csi.h"
#include "k8s/client.h"
#include "systemd/macro.h"
#include "volume/manager.h"

typedef struct Metrics Metrics;

/* Fills *ret at scrape time, for kvolumed_volumes{state}. */
typedef void (*metrics_volume_stats_t)(VolumeManagerStats *ret, void *userdata);

int metrics_new(Metrics **ret);
Metrics *metrics_free(Metrics *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Metrics *, metrics_free);

/* The observe functions take m == NULL as "metrics off" and do nothing.  A
 * non-finite or negative duration is ignored (-EINVAL): it can only come
 * from a broken clock and would poison _sum. */

/* csi_operations_seconds{driver_name,method_name,grpc_status_code,migrated};
 * method is the full gRPC method ("/csi.v1.Node/NodeStageVolume"), code the
 * name from csi_code_name(), migrated "true" for a call made for an in-tree
 * volume CSI migration serves (kubelet: its MountDevice and SetUp). */
int metrics_observe_csi(Metrics *m, const char *driver, const char *method, const char *code, bool migrated,
                        double seconds);

/* storage_operation_duration_seconds{volume_plugin,operation_name,status,migrated},
 * status "success" or "fail-unknown" as kubelet's, migrated "true" for an
 * operation of a volume CSI migration serves (kubelet's Spec.Migrated). */
int metrics_observe_storage(Metrics *m, const char *plugin, const char *operation, bool success, bool migrated,
                            double seconds);

/* kvolumed_reconcile_seconds: the wall time of one reconciler pass of the
 * volume manager (from the start of the pass to the moment it has issued
 * every operation it decided on, not until those operations finish).  Meant
 * to be called by the volume manager once per pass. */
void metrics_observe_reconcile(Metrics *m, double seconds);

/* Adapters with the signatures of csi_client_set_metrics_hook() and
 * volume_manager_set_metrics_hook(); userdata is the Metrics. */
void metrics_csi_hook(const CsiCallMetrics *call, void *userdata);
void metrics_volume_hook(const char *plugin, const char *operation, bool success, bool migrated,
                         uint64_t duration_usec, void *userdata);

/* Also kvolumed_api_last_success_timestamp_seconds: the wall-clock time of
 * the last request the API server answered with a 2xx status. */
/* client-go's rest_client_requests_total{code,method,host} (code "<error>"
 * for status 0: no HTTP answer) and, unless watch,
 * rest_client_request_duration_seconds{verb,host} with client-go's buckets. */
int metrics_observe_api_request(Metrics *m, const char *method, const char *host, long status, bool watch,
                                double seconds);
/* Adapter for k8s_client_set_request_hook(); userdata is the Metrics. */
void metrics_k8s_hook(const K8sRequestMetrics *req, void *userdata);

/* kvolumed_build_info{version,commit} 1, shown once set. */
int metrics_set_build_info(Metrics *m, const char *version, const char *commit);

/* The process_* families of this process (agent/procmetrics.h), read at
 * each scrape; off until called, so that a registry's text is exact. */
void metrics_enable_process(Metrics *m);

/* Where kvolumed_volumes reads its values; NULL removes the gauge. */
void metrics_set_volume_stats_source(Metrics *m, metrics_volume_stats_t source, void *userdata);

/* ---- values read at scrape time ------------------------------------------ */

/* The families whose values a collector gives at each scrape, with their
 * labels in order.  Each appears once it has a sample. */
typedef enum MetricsScraped {
        /* kubelet's volume stats gauges, {namespace,persistentvolumeclaim} */
        METRICS_VOLUME_STATS_AVAILABLE_BYTES,
        METRICS_VOLUME_STATS_CAPACITY_BYTES,
        METRICS_VOLUME_STATS_HEALTH_ABNORMAL, /* kubelet_volume_stats_health_status_abnormal */
        METRICS_VOLUME_STATS_INODES,
        METRICS_VOLUME_STATS_INODES_FREE,
        METRICS_VOLUME_STATS_INODES_USED,
        METRICS_VOLUME_STATS_USED_BYTES,
        METRICS_API_WATCH_RESTARTS, /* kvolumed_api_watch_restarts_total{resource}, counter */
        METRICS_CSI_CALLS_IN_FLIGHT, /* kvolumed_csi_calls_in_flight{driver_name} */
        METRICS_CSI_CALLS_QUEUED,    /* kvolumed_csi_calls_queued{driver_name} */
        METRICS_CSI_DRIVER_REGISTERED, /* kvolumed_csi_driver_registered{driver_name} */
        METRICS_RUNTIME_ERRORS,      /* kvolumed_runtime_errors_total, counter */
        METRICS_RUNTIME_UNREACHABLE, /* kvolumed_runtime_unreachable */
        METRICS_RUNTIME_WAITING_PODS, /* kvolumed_runtime_waiting_pods */
        METRICS_VOLUMES_FAILED,      /* kvolumed_volumes_failed{driver_name,reason} */
        METRICS_VOLUMES_OLDEST_UNREADY, /* kvolumed_volumes_oldest_unready_seconds{owner} */
        METRICS_VOLUME_MANAGER_TOTAL_VOLUMES, /* volume_manager_total_volumes{plugin_name,state} */
        _METRICS_SCRAPED_MAX,
} MetricsScraped;

typedef struct MetricsScrape MetricsScrape;

/* One sample; "values" holds one label value per label of the family.  A
 * second sample with the same label values is dropped (the first stays).
 * 0 or -errno. */
int metrics_scrape_add(MetricsScrape *s, MetricsScraped family, const char *const *values, double value);

/* Called at each scrape to give the samples above; NULL removes it. */
typedef void (*metrics_collector_t)(MetricsScrape *s, void *userdata);
void metrics_set_collector(Metrics *m, metrics_collector_t collect, void *userdata);

/* Writes the whole registry in text format 0.0.4.  0 or -errno. */
int metrics_write(Metrics *m, FILE *f);

/* The content type of what metrics_write() produces. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
