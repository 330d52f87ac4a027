/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the files of csi/ share among themselves; nothing outside csi/ (except
 * its unit tests) includes this. */

#include <protobuf-c/protobuf-c.h>

#include "csi/csi.h"
#include "csi/grpc.h"

#define CSI_DEFAULT_CALL_TIMEOUT_USEC (2 * USEC_PER_MINUTE)
#define CSI_DEFAULT_MAX_PARALLEL 64u
#define CSI_DEFAULT_REGISTRATION_TIMEOUT_USEC USEC_PER_SEC
/* NodeGetVolumeStats calls in flight per driver, beside max-parallel. */
#define CSI_STATS_MAX_PARALLEL 2u

typedef struct CsiRegistration CsiRegistration;
typedef struct CsiStaticDrivers CsiStaticDrivers;

typedef struct CsiDriver {
        char *name;
        GrpcChannel *channel;
        GrpcChannel *stats_channel; /* NodeGetVolumeStats only; made at the first such call */
        char *registration_socket; /* NULL: configured statically */
        char *version;
        struct CsiDriver *next;
} CsiDriver;

struct CsiClient {
        sd_event *event;
        GrpcTransport *transport;
        uint64_t call_timeout_usec;
        uint64_t registration_timeout_usec;
        unsigned max_parallel;
        char *registration_dir;

        CsiDriver *static_drivers;
        CsiDriver *registered_drivers;
        CsiCall *calls; /* not yet completed */

        csi_metrics_hook_t metrics_hook;
        void *metrics_userdata;
        CsiRegistrationCallbacks registration_cb;
        void *registration_userdata;
        CsiRegistration *registration;
        CsiStaticDrivers *static_probes;
        char *refusal_reason; /* set by a "registered" callback that refuses */
};

/* Registered drivers come first: their endpoint is the live one. */
CsiDriver *csi_client_find_driver(CsiClient *c, const char *name);
/* Adds (or replaces) a registered driver, which takes its own reference on the channel. */
int csi_client_add_registered(CsiClient *c, const char *name, GrpcChannel *ch, const char *registration_socket,
                              const char *version);
/* Removes the registered driver "name" if it came from "registration_socket". */
bool csi_client_remove_registered(CsiClient *c, const char *name, const char *registration_socket);

/* The calls the registration flow makes before a driver is callable by name. */
int csi_get_plugin_info_on(CsiClient *c, GrpcChannel *ch, const char *driver, csi_plugin_info_done_t done,
                           void *userdata, CsiCall **ret_call);
int csi_node_get_info_on(CsiClient *c, GrpcChannel *ch, const char *driver, csi_node_info_done_t done,
                         void *userdata, CsiCall **ret_call);

/* The call's failure is the caller's to report (with its own rule for
 * repeats): client.c logs it at debug level only. */
void csi_call_set_quiet(CsiCall *call);

/* registration.c */
/* A driver whose "registered" callback said -EAGAIN (the Node not listed
 * yet, the API server away at start) is asked again when the caller calls
 * csi_client_retry_deferred(); this timer is only the safety net, 1 s
 * doubling to 30 s: every retry is a GetInfo, GetPluginInfo and NodeGetInfo
 * handshake, which once a second for a whole control-plane outage was noise
 * in the driver's log and ours. */
#define CSI_DEFERRED_RETRY_USEC USEC_PER_SEC
#define CSI_DEFERRED_RETRY_MAX_USEC (30 * USEC_PER_SEC)

static inline uint64_t csi_deferred_backoff_next(uint64_t *backoff_usec) {
        *backoff_usec = *backoff_usec ? MIN(*backoff_usec * 2, CSI_DEFERRED_RETRY_MAX_USEC) : CSI_DEFERRED_RETRY_USEC;
        return *backoff_usec;
}

int csi_registration_new(CsiClient *c, const char *dir, CsiRegistration **ret);
void csi_registration_retry_deferred(CsiRegistration *r);
CsiRegistration *csi_registration_free(CsiRegistration *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(CsiRegistration *, csi_registration_free);
/* "1.0.0", "v1.2", "1" → highest supported 1.x in *ret (points into versions);
 * -ENOENT when none is. */
int csi_highest_supported_version(char *const *versions, size_t n, const char **ret);

/* static.c: NodeGetInfo of the statically configured drivers, at start, when
 * their socket is created again, and with backoff while they are not up. */
int csi_static_drivers_start(CsiClient *c, CsiStaticDrivers **ret);
CsiStaticDrivers *csi_static_drivers_free(CsiStaticDrivers *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(CsiStaticDrivers *, csi_static_drivers_free);
void csi_static_drivers_retry_deferred(CsiStaticDrivers *s);

/* inotify.c: the directory watches of registration.c and static.c read
 * their events the same way: every event queued on the non-blocking fd, one
 * call each. */
struct inotify_event;
typedef void (*csi_inotify_event_t)(const struct inotify_event *ev, void *userdata);
void csi_inotify_drain(int fd, csi_inotify_event_t fn, void *userdata);

/* describe.c */
bool csi_field_is_secret(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f);
/* "{volume_id:"v", secrets:<2 redacted>, ...}"; NULL on ENOMEM. */
char *csi_describe_message(const ProtobufCMessage *m);
