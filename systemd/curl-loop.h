/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* libcurl's multi interface driven by sd-event: curl tells us which sockets to
 * watch and when to wake it (CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION);
 * sd-event watches them and calls back into curl.  Transfers never block the
 * loop.  The k8s and csi modules each own one CurlLoop, because they need
 * different multi settings (HTTP/2 multiplexing to the API server, a connection
 * per call to CSI drivers on libcurl 7.88). */

#include <curl/curl.h>
#include <systemd/sd-event.h>

#include "systemd/macro.h"

typedef struct CurlLoop CurlLoop;

/* Called once when a transfer ends, successfully or not.  The callee owns
 * "easy" again (it was removed from the multi handle) and may free or re-add it. */
typedef void (*curl_loop_done_t)(CurlLoop *loop, CURL *easy, CURLcode result, void *userdata);

/* Call once per process before anything else uses curl. */
int curl_loop_global_init(void);

int curl_loop_new(sd_event *event, CurlLoop **ret);
CurlLoop *curl_loop_free(CurlLoop *loop);
DEFINE_TRIVIAL_CLEANUP_FUNC(CurlLoop *, curl_loop_free);

/* The multi handle, for settings such as CURLMOPT_PIPELINING or
 * CURLMOPT_MAX_HOST_CONNECTIONS.  Socket and timer callbacks are ours. */
CURLM *curl_loop_multi(CurlLoop *loop);

/* Starts "easy" on the loop.  Uses the easy handle's CURLOPT_PRIVATE: callers
 * must not set it. */
int curl_loop_add(CurlLoop *loop, CURL *easy, curl_loop_done_t done, void *userdata);

/* Cancels a running transfer; its done callback is not called.  Returns
 * -ENOENT when "easy" is not running on this loop. */
int curl_loop_cancel(CurlLoop *loop, CURL *easy);

/* Number of transfers running. */
unsigned curl_loop_running(CurlLoop *loop);

/* Maps a CURLcode to -errno, for callers that want one. */
int curl_code_to_errno(CURLcode code);
