/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A small HTTP server for /metrics and the debug endpoints: libmicrohttpd in
 * external epoll mode, driven by the agent's sd-event loop in the agent's one
 * thread (MHD's epoll fd is watched with sd_event_add_io and MHD_get_timeout()
 * arms a timer).  Handlers therefore run on the loop, between other events:
 * they may read any agent state without locks and must be quick. */

#include <stdio.h>
#include <sys/socket.h>
#include <systemd/sd-event.h>

#include "systemd/macro.h"

typedef struct HttpServer HttpServer;

/* Writes the body of a GET (or HEAD) into f and may set *content_type (a
 * static string; default "text/plain; charset=utf-8").  Returns the HTTP
 * status, e.g. 200 or 503, or -errno, which answers 500 and is logged. */
typedef int (*http_handler_t)(FILE *f, const char **content_type, void *userdata);


/* Binds and listens on `listen` (port 0: chosen by the kernel) and serves
 * from `event`.  A bind failure is returned (-EADDRINUSE, -EADDRNOTAVAIL, ...)
 * and logged with the address.  Requests for paths without a route get 404,
 * methods other than GET and HEAD get 405. */
int http_server_new(sd_event *event, const char *listen, HttpServer **ret);
HttpServer *http_server_free(HttpServer *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpServer *, http_server_free);

/* Serves `path` (exact match, no query string) with handler.  -EEXIST if
 * the path has a route already. */
int http_server_add_route(HttpServer *s, const char *path, http_handler_t handler, void *userdata);

/* The address actually bound, e.g. "127.0.0.1:39211" or "[::1]:9000". */
const char *http_server_address(HttpServer *s);
unsigned http_server_port(HttpServer *s);
