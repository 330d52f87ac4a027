/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The CSI client of kvolumed: typed, asynchronous unary calls to the Identity
 * and Node services of CSI drivers, over gRPC (HTTP/2 cleartext on a unix
 * socket, spoken by libcurl on the caller's sd-event loop), and the registry of
 * drivers: those configured statically and those announced by kubelet plugin
 * registration in the registration directory.
 *
 * Everything runs on one sd-event loop, in one thread.  Callbacks are never
 * called from inside the function that started the call, and a callback must
 * not free the CsiClient (leave the loop first).
 *
 * Requests are plain C structs the caller owns; they are encoded before the
 * call function returns, so they may live on the stack.  Responses passed to
 * a callback are valid only during that callback. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "systemd/macro.h"

/* gRPC status codes (grpc statuscodes.md). */
typedef enum CsiCode {
        CSI_CODE_OK = 0,
        CSI_CODE_CANCELLED = 1,
        CSI_CODE_UNKNOWN = 2,
        CSI_CODE_INVALID_ARGUMENT = 3,
        CSI_CODE_DEADLINE_EXCEEDED = 4,
        CSI_CODE_NOT_FOUND = 5,
        CSI_CODE_ALREADY_EXISTS = 6,
        CSI_CODE_PERMISSION_DENIED = 7,
        CSI_CODE_RESOURCE_EXHAUSTED = 8,
        CSI_CODE_FAILED_PRECONDITION = 9,
        CSI_CODE_ABORTED = 10,
        CSI_CODE_OUT_OF_RANGE = 11,
        CSI_CODE_UNIMPLEMENTED = 12,
        CSI_CODE_INTERNAL = 13,
        CSI_CODE_UNAVAILABLE = 14,
        CSI_CODE_DATA_LOSS = 15,
        CSI_CODE_UNAUTHENTICATED = 16,
        _CSI_CODE_MAX,
} CsiCode;

/* The name as kubelet's csi_operations_seconds spells it (grpc-go's
 * codes.Code.String()): "OK", "Canceled", "DeadlineExceeded", ...  Codes
 * outside 0..16 never leave the transport (they are read as UNKNOWN), so a
 * value out of range here also gives "Unknown". */
const char *csi_code_name(CsiCode code);
/* kubelet's isFinalError: false for CANCELLED, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, ABORTED and UNAVAILABLE (the driver may still be
 * working, or may have done the work: the operation is uncertain); transport
 * failures arrive as UNAVAILABLE and are therefore not final either. */
bool csi_code_is_final(CsiCode code);

/* The status of a finished call.  message is percent-decoded, never NULL. */
typedef struct CsiStatus {
        CsiCode code;
        const char *message;
        const char *driver;
        const char *method;      /* full gRPC method, "/csi.v1.Node/NodeStageVolume" */
        uint64_t duration_usec;  /* from the call function to the callback */
} CsiStatus;

typedef struct CsiKeyValue {
        const char *key;
        const char *value;
} CsiKeyValue;

/* ---- requests ------------------------------------------------------------ */

typedef enum CsiAccessMode {
        CSI_ACCESS_MODE_UNKNOWN = 0,
        CSI_ACCESS_MODE_SINGLE_NODE_WRITER = 1,
        CSI_ACCESS_MODE_SINGLE_NODE_READER_ONLY = 2,
        CSI_ACCESS_MODE_MULTI_NODE_READER_ONLY = 3,
        CSI_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER = 4,
        CSI_ACCESS_MODE_MULTI_NODE_MULTI_WRITER = 5,
        CSI_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER = 6,
        CSI_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER = 7,
} CsiAccessMode;

typedef enum CsiAccessType {
        CSI_ACCESS_TYPE_MOUNT,
        CSI_ACCESS_TYPE_BLOCK,
} CsiAccessType;

typedef struct CsiVolumeCapability {
        CsiAccessType access_type;
        /* Only for CSI_ACCESS_TYPE_MOUNT. */
        const char *fs_type;
        const char *const *mount_flags;
        size_t n_mount_flags;
        const char *volume_mount_group;
        CsiAccessMode access_mode;
} CsiVolumeCapability;

/* NULL strings are sent as empty (absent) fields.  Secrets are sent but never
 * logged, not even at debug level. */
typedef struct CsiNodeStageVolumeRequest {
        const char *volume_id; /* required */
        const CsiKeyValue *publish_context;
        size_t n_publish_context;
        const char *staging_target_path; /* required */
        const CsiVolumeCapability *volume_capability;
        const CsiKeyValue *secrets;
        size_t n_secrets;
        const CsiKeyValue *volume_context;
        size_t n_volume_context;
} CsiNodeStageVolumeRequest;

typedef struct CsiNodeUnstageVolumeRequest {
        const char *volume_id;           /* required */
        const char *staging_target_path; /* required */
} CsiNodeUnstageVolumeRequest;

typedef struct CsiNodePublishVolumeRequest {
        const char *volume_id; /* required */
        const CsiKeyValue *publish_context;
        size_t n_publish_context;
        const char *staging_target_path;
        const char *target_path; /* required */
        const CsiVolumeCapability *volume_capability;
        bool readonly;
        const CsiKeyValue *secrets;
        size_t n_secrets;
        const CsiKeyValue *volume_context;
        size_t n_volume_context;
} CsiNodePublishVolumeRequest;

typedef struct CsiNodeUnpublishVolumeRequest {
        const char *volume_id;   /* required */
        const char *target_path; /* required */
} CsiNodeUnpublishVolumeRequest;

typedef struct CsiNodeGetVolumeStatsRequest {
        const char *volume_id;   /* required */
        const char *volume_path; /* required */
        const char *staging_target_path;
        uint64_t timeout_usec;   /* this call's deadline; 0: the client's call-timeout */
} CsiNodeGetVolumeStatsRequest;

typedef struct CsiNodeExpandVolumeRequest {
        const char *volume_id; /* required */
        const char *volume_path;
        bool has_capacity_range;
        int64_t required_bytes;
        int64_t limit_bytes;
        const char *staging_target_path;
        const CsiVolumeCapability *volume_capability;
        const CsiKeyValue *secrets;
        size_t n_secrets;
} CsiNodeExpandVolumeRequest;

/* ---- responses ------------------------------------------------------------ */

typedef struct CsiPluginInfo {
        const char *name;
        const char *vendor_version;
        const CsiKeyValue *manifest;
        size_t n_manifest;
} CsiPluginInfo;

typedef enum CsiVolumeExpansion {
        CSI_VOLUME_EXPANSION_NONE = 0,
        CSI_VOLUME_EXPANSION_ONLINE = 1,
        CSI_VOLUME_EXPANSION_OFFLINE = 2,
} CsiVolumeExpansion;

typedef struct CsiPluginCapabilities {
        bool controller_service;
        bool volume_accessibility_constraints;
        bool group_controller_service;
        bool snapshot_metadata_service;
        CsiVolumeExpansion volume_expansion;
} CsiPluginCapabilities;

typedef struct CsiProbeResult {
        bool has_ready; /* the driver may leave "ready" out: then it is ready */
        bool ready;
} CsiProbeResult;

/* NodeServiceCapability.RPC.Type values. */
typedef enum CsiNodeCapability {
        CSI_NODE_CAP_STAGE_UNSTAGE_VOLUME = 1,
        CSI_NODE_CAP_GET_VOLUME_STATS = 2,
        CSI_NODE_CAP_EXPAND_VOLUME = 3,
        CSI_NODE_CAP_VOLUME_CONDITION = 4,
        CSI_NODE_CAP_SINGLE_NODE_MULTI_WRITER = 5,
        CSI_NODE_CAP_VOLUME_MOUNT_GROUP = 6,
        _CSI_NODE_CAP_MAX,
} CsiNodeCapability;

typedef struct CsiNodeCapabilities {
        uint32_t mask; /* bit (1u << CsiNodeCapability) per capability reported */
} CsiNodeCapabilities;

static inline bool csi_node_capabilities_has(const CsiNodeCapabilities *c, CsiNodeCapability cap) {
        return cap > 0 && cap < 32 && (c->mask & (UINT32_C(1) << cap));
}

typedef struct CsiNodeInfo {
        const char *node_id;
        int64_t max_volumes_per_node;
        const CsiKeyValue *topology; /* accessible_topology.segments */
        size_t n_topology;
} CsiNodeInfo;

typedef enum CsiVolumeUsageUnit {
        CSI_VOLUME_USAGE_UNKNOWN = 0,
        CSI_VOLUME_USAGE_BYTES = 1,
        CSI_VOLUME_USAGE_INODES = 2,
} CsiVolumeUsageUnit;

typedef struct CsiVolumeUsage {
        int64_t available;
        int64_t total;
        int64_t used;
        CsiVolumeUsageUnit unit;
} CsiVolumeUsage;

typedef struct CsiVolumeStats {
        const CsiVolumeUsage *usage;
        size_t n_usage;
        bool has_condition;
        bool abnormal;
        const char *condition_message;
} CsiVolumeStats;

typedef struct CsiExpandResult {
        int64_t capacity_bytes;
} CsiExpandResult;

/* ---- calls ---------------------------------------------------------------- */

typedef struct CsiClient CsiClient;
typedef struct CsiCall CsiCall;

/* Completion callbacks.  The response pointer is non-NULL exactly when
 * status->code is CSI_CODE_OK. */
typedef void (*csi_done_t)(const CsiStatus *status, void *userdata);
typedef void (*csi_plugin_info_done_t)(const CsiStatus *status, const CsiPluginInfo *info, void *userdata);
typedef void (*csi_plugin_capabilities_done_t)(const CsiStatus *status, const CsiPluginCapabilities *caps,
                                               void *userdata);
typedef void (*csi_probe_done_t)(const CsiStatus *status, const CsiProbeResult *probe, void *userdata);
typedef void (*csi_node_capabilities_done_t)(const CsiStatus *status, const CsiNodeCapabilities *caps,
                                             void *userdata);
typedef void (*csi_node_info_done_t)(const CsiStatus *status, const CsiNodeInfo *info, void *userdata);
typedef void (*csi_volume_stats_done_t)(const CsiStatus *status, const CsiVolumeStats *stats, void *userdata);
typedef void (*csi_expand_done_t)(const CsiStatus *status, const CsiExpandResult *result, void *userdata);

/* Each call function starts one call to the named driver and returns 0, or
 * fails without calling back: -ENOENT when no driver of that name is known
 * (kubelet's "driver name ... not found in the list of registered CSI
 * drivers", a transient error), -EINVAL when a required field is empty,
 * -ENOMEM.  On success *ret_call (if ret_call is non-NULL) is a handle valid
 * until the callback returns or csi_call_cancel() is called.  Beyond the
 * driver's max-parallel limit, calls wait in a FIFO queue; the call timeout
 * counts from here, queue time included. */
int csi_get_plugin_info(CsiClient *c, const char *driver, csi_plugin_info_done_t done, void *userdata,
                        CsiCall **ret_call);
int csi_get_plugin_capabilities(CsiClient *c, const char *driver, csi_plugin_capabilities_done_t done,
                                void *userdata, CsiCall **ret_call);
int csi_probe(CsiClient *c, const char *driver, csi_probe_done_t done, void *userdata, CsiCall **ret_call);
int csi_node_get_capabilities(CsiClient *c, const char *driver, csi_node_capabilities_done_t done,
                              void *userdata, CsiCall **ret_call);
int csi_node_get_info(CsiClient *c, const char *driver, csi_node_info_done_t done, void *userdata,
                      CsiCall **ret_call);
int csi_node_stage_volume(CsiClient *c, const char *driver, const CsiNodeStageVolumeRequest *req,
                          csi_done_t done, void *userdata, CsiCall **ret_call);
int csi_node_unstage_volume(CsiClient *c, const char *driver, const CsiNodeUnstageVolumeRequest *req,
                            csi_done_t done, void *userdata, CsiCall **ret_call);
int csi_node_publish_volume(CsiClient *c, const char *driver, const CsiNodePublishVolumeRequest *req,
                            csi_done_t done, void *userdata, CsiCall **ret_call);
int csi_node_unpublish_volume(CsiClient *c, const char *driver, const CsiNodeUnpublishVolumeRequest *req,
                              csi_done_t done, void *userdata, CsiCall **ret_call);
/* NodeGetVolumeStats does not count against max-parallel: it has a limit of
 * its own, 2 calls in flight per driver (then a FIFO queue), so that stats
 * never delay a stage or publish however slow the driver answers them. */
int csi_node_get_volume_stats(CsiClient *c, const char *driver, const CsiNodeGetVolumeStatsRequest *req,
                              csi_volume_stats_done_t done, void *userdata, CsiCall **ret_call);
int csi_node_expand_volume(CsiClient *c, const char *driver, const CsiNodeExpandVolumeRequest *req,
                           csi_expand_done_t done, void *userdata, CsiCall **ret_call);

/* Abandons a call that has not called back yet: the request is withdrawn from
 * the queue or its HTTP/2 stream (and, on libcurl < 8, its connection) is
 * closed, which a gRPC server sees as a cancellation.  The callback is not
 * called; the call is logged and counted in the metrics as CANCELLED. */
void csi_call_cancel(CsiCall *call);

/* The pod a call is made for (NodePublishVolume, NodeUnpublishVolume):
 * its log lines carry POD= ("namespace/name") and POD_UID= and name it. */
void csi_call_set_pod(CsiCall *call, const char *pod, const char *pod_uid);

/* ---- the client ----------------------------------------------------------- */

typedef struct CsiDriverEndpoint {
        const char *name;     /* CSI driver name */
        const char *endpoint; /* "unix:///absolute/path" */
} CsiDriverEndpoint;

typedef enum CsiConnectionReuse {
        /* Reuse and multiplex one connection per driver on libcurl >= 8, a
         * fresh connection per call on older libcurl (curl bug 10634). */
        CSI_CONNECTION_REUSE_AUTO,
        /* A fresh connection per call whatever the libcurl version. */
        CSI_CONNECTION_REUSE_NEVER,
} CsiConnectionReuse;

typedef struct CsiClientOptions {
        uint64_t call_timeout_usec;   /* [csi] call-timeout; 0: 2 min */
        unsigned max_parallel;        /* [csi] max-parallel, per driver; 0: 64 */
        size_t max_receive_bytes;     /* largest response message; 0: 4 MiB */
        const char *registration_dir; /* [csi] registration-dir; NULL or "": off */
        const CsiDriverEndpoint *drivers; /* [driver "NAME"] sections */
        size_t n_drivers;
        CsiConnectionReuse connection_reuse;
        /* Timeout of the pluginregistration GetInfo call; 0: 1 s as kubelet. */
        uint64_t registration_timeout_usec;
} CsiClientOptions;

/* A configuration reload: the per-call deadline and the per-driver limit of
 * calls in flight for calls started from now on (0: the default). */
void csi_client_set_limits(CsiClient *c, uint64_t call_timeout_usec, unsigned max_parallel);
/* A configuration reload of the [driver "NAME"] sections: drivers no longer
 * listed, or listed with another endpoint, are dropped (the "deregistered"
 * callback says so; calls in flight finish), new ones are added, and every
 * static driver is asked NodeGetInfo again.  -EINVAL (and nothing changed)
 * for an invalid list. */
int csi_client_set_static_drivers(CsiClient *c, const CsiDriverEndpoint *drivers, size_t n_drivers);

/* Validates the options (driver names, unix:// endpoints) and creates the
 * client; nothing is started yet.  -EINVAL on bad options. */
int csi_client_new(sd_event *event, const CsiClientOptions *options, CsiClient **ret);
/* Cancels every call (no callbacks), stops watching, frees.  Not from a callback. */
CsiClient *csi_client_free(CsiClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(CsiClient *, csi_client_free);

/* True when this process's libcurl multiplexes calls on one connection per driver. */
bool csi_client_reuses_connections(CsiClient *c);

/* ---- metrics -------------------------------------------------------------- */

typedef struct CsiCallMetrics {
        const char *driver;
        const char *method; /* "/csi.v1.Node/NodeStageVolume" */
        CsiCode code;       /* label value: csi_code_name(code) */
        bool migrated;      /* label value "true": see csi_call_mark_migrated() */
        uint64_t duration_usec;
} CsiCallMetrics;

/* The calls of each known driver now: running on its socket, and waiting
 * for a free slot (its max-parallel, or the stats limit).  Once per driver
 * name, for kvolumed_csi_calls_in_flight. */
typedef void (*csi_driver_calls_t)(const char *driver, unsigned in_flight, unsigned queued, void *userdata);
void csi_client_foreach_driver_calls(CsiClient *c, csi_driver_calls_t cb, void *userdata);

/* Called once per finished (or cancelled) csi.v1 call, for
 * csi_operations_seconds.  NULL turns it off. */
typedef void (*csi_metrics_hook_t)(const CsiCallMetrics *m, void *userdata);
void csi_client_set_metrics_hook(CsiClient *c, csi_metrics_hook_t hook, void *userdata);
/* The call (started, not answered yet) is made for a volume CSI migration
 * serves (an in-tree volume translated to the driver's): its sample is
 * labelled migrated="true", as kubelet labels the calls of a migrated
 * volume's MountDevice and SetUp.  NULL: nothing. */
void csi_call_mark_migrated(CsiCall *call);

/* ---- driver registry and plugin registration ------------------------------ */

/* A driver that answered NodeGetInfo: one announced by plugin registration,
 * or one configured statically (registration_socket and version NULL). */
typedef struct CsiRegisteredDriver {
        const char *name;
        const char *endpoint_path;       /* the CSI socket */
        const char *registration_socket; /* where GetInfo was answered; NULL: configured statically */
        const char *version;             /* the supported version chosen, e.g. "1.0.0"; NULL: static */
        const CsiNodeInfo *node_info;    /* the driver's NodeGetInfo answer */
} CsiRegisteredDriver;

typedef struct CsiRegistrationCallbacks {
        /* The driver is registered and callable by name.  A negative return
         * refuses it: it is removed again and the plugin is told
         * NotifyRegistrationStatus(false, "... registration failed ..."), as
         * kubelet does when InstallCSIDriver fails.
         * Also called for a statically configured driver each time it answers
         * NodeGetInfo: at start, when its socket is created again, and on the
         * retries (backoff 500 ms to 30 s) while it is not up.  A negative
         * return then means "try again later": the driver stays callable.
         * -EAGAIN means "not yet": the caller lacks what it needs to decide
         * (the Node is not listed yet); the plugin is not told, and the
         * driver is asked again within a second, or at once after
         * csi_client_retry_deferred(). */
        int (*registered)(CsiClient *c, const CsiRegisteredDriver *d, void *userdata);
        /* Its registration socket disappeared, or (registration_socket NULL)
         * a reload removed it from the configuration; the name is no longer
         * callable (unless it is also configured the other way). */
        void (*deregistered)(CsiClient *c, const char *driver, const char *registration_socket, void *userdata);
        /* A registration attempt failed (it is retried with backoff while the
         * socket exists); for logs and tests.  May be NULL.  For a static
         * driver, "registration_socket" is its CSI socket. */
        void (*failed)(CsiClient *c, const char *registration_socket, const char *reason, void *userdata);
} CsiRegistrationCallbacks;

void csi_client_set_registration_callbacks(CsiClient *c, const CsiRegistrationCallbacks *cb, void *userdata);

/* From a "registered" callback about to refuse the driver: the reason the
 * plugin is told in NotifyRegistrationStatus (kubelet passes InstallCSIDriver's
 * error on, e.g. "detected topology value collision: ..."). */
void csi_client_set_refusal_reason(CsiClient *c, const char *reason);

/* Asks again at once the drivers whose "registered" callback said -EAGAIN. */
void csi_client_retry_deferred(CsiClient *c);

/* Starts watching the registration directory (created 0755 when missing),
 * registering the sockets already there (nothing when registration is off),
 * and asking the statically configured drivers NodeGetInfo. */
int csi_client_start(CsiClient *c);

/* Whether calls to "driver" can be made (statically configured or registered). */
bool csi_client_has_driver(CsiClient *c, const char *driver);
