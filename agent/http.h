/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A small HTTP server for /metrics and the debug endpoints: libmicrohttpd in
 * external epoll mode, driven by the agent's sd-event loop in the agent's one
 * thread (MHD's epoll fd is watched with sd_event_add_io and MHD_get_timeout()
 * arms a timer).  Handlers therefore run on the loop, between other events:
 * they may read any agent state without locks and must be quick. */

#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
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

/* Serves on a unix socket at `path` instead (the local volumes API): its
 * directories must be root's alone (made 0755 if missing), a socket that
 * answers there is another process's and refused (-EADDRINUSE), one left
 * by a process that is gone is replaced, and the socket is 0600 root:root,
 * or 0660 root:gid when gid is not (gid_t) -1, before any client can
 * connect (agent/apisocket.h).  It is removed at the end if still ours. */
int http_server_new_unix(sd_event *event, const char *path, gid_t gid, HttpServer **ret);

/* ---- requests that see their URL and may be answered later ------------------ */

/* One GET (or HEAD) given to a request handler.  The handler answers it
 * with http_request_reply() before it returns, or calls
 * http_request_suspend() and answers it later from the loop: the
 * connection then holds no thread and nothing polls for it (MHD suspends
 * it); the request deadline of idle connections does not apply meanwhile. */
typedef struct HttpRequest HttpRequest;

/* Returns 0, or -errno (answered 500 and logged, if not answered yet). */
typedef int (*http_request_handler_t)(HttpRequest *req, void *userdata);

/* Called when a suspended request's connection goes away unanswered (the
 * server stops, or the client closed its end of a unix socket: its slot is
 * freed at once): the request must not be used after it. */
typedef void (*http_request_abandoned_t)(HttpRequest *req, void *userdata);

/* Serves every path starting with `prefix` (or exactly `path` when prefix
 * is false) with handler; the exact routes of http_server_add_route() win. */
int http_server_add_request_route(HttpServer *s, const char *path, bool prefix, http_request_handler_t handler,
                                  void *userdata);

const char *http_request_path(const HttpRequest *req);
/* A query argument, or NULL when absent ("?x" gives ""). */
const char *http_request_arg(HttpRequest *req, const char *key);
/* The first query argument whose key is not in the NULL-terminated list
 * `known`, or NULL: a typo in an argument must not go unnoticed. */
const char *http_request_unknown_arg(HttpRequest *req, const char *const *known);
/* Answers with status and body (taken, freed whatever happens).  At most
 * once per request; a suspended request is resumed. */
int http_request_reply(HttpRequest *req, unsigned status, const char *content_type, char *body, size_t size);
/* The request will be answered later; "abandoned" (optional) is called if
 * its connection goes first.  -EBUSY when the server holds too many. */
int http_request_suspend(HttpRequest *req, http_request_abandoned_t abandoned, void *userdata);

/* The address actually bound, e.g. "127.0.0.1:39211" or "[::1]:9000", or
 * the unix socket's path. */
const char *http_server_address(HttpServer *s);
unsigned http_server_port(HttpServer *s);
