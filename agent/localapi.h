/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The local volumes API for the pod runner (DESIGN.md §2 "The node's other
 * half"), HTTP/1.1 + JSON on a unix socket:
 *   GET /v1/pods/{uid}/volumes[?wait=mounted|unmounted[&timeout=D]]
 *   GET /volumes[?pod=NAMESPACE/NAME][&state=STATE]
 * A wait is a suspended request with a watch on its pod (volume/podview.h):
 * it is answered from the reconcile pass that changed the pod, or by its
 * own timer at the timeout; nothing polls. */

#include <sys/types.h>
#include <systemd/sd-event.h>

#include "agent/http.h"
#include "systemd/macro.h"
#include "volume/manager.h"

/* kubelet's podAttachAndMountTimeout, and the longest wait asked for. */
#define LOCAL_API_DEFAULT_TIMEOUT_USEC (2 * USEC_PER_MINUTE + 3 * USEC_PER_SEC)
#define LOCAL_API_MAX_TIMEOUT_USEC (10 * USEC_PER_MINUTE)

typedef struct LocalApi LocalApi;

/* Serves on `path`, 0600 root, or 0660 with group gid ((gid_t) -1: none).
 * Borrows the manager, which must outlive it. */
int local_api_new(sd_event *event, VolumeManager *m, const char *path, gid_t gid, LocalApi **ret);
/* The waiters left get 503. */
LocalApi *local_api_free(LocalApi *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(LocalApi *, local_api_free);

/* /volumes with its filters, for any server (the metrics endpoint serves it
 * too on a loopback address). */
int local_api_add_volumes_route(HttpServer *s, VolumeManager *m);
