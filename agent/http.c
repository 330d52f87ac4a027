/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <microhttpd.h>

#include "agent/apisocket.h"
#include "agent/http.h"
#include "systemd/log.h"
#include "systemd/validate.h"

/* Scrapers and probes are few, but any local process can connect, and the
 * loop must answer /healthz whatever they do.  MHD's hard cap bounds the file
 * descriptors; well before it, the connection that has waited longest for
 * its next request is cut, so a flood of idle or slow-drip connections makes
 * room for a probe instead of shutting it out.  Every connection must send a
 * complete request within HTTP_REQUEST_DEADLINE_USEC of opening or of its
 * last answer (a slow-drip client never finishes one); MHD's own idle timeout
 * backs that up. */
#define HTTP_CONNECTION_LIMIT 512u
#define HTTP_EVICT_ABOVE 384u
#define HTTP_CONNECTION_TIMEOUT_SEC 10u
#define HTTP_REQUEST_DEADLINE_USEC (5 * USEC_PER_SEC)
#define HTTP_SWEEP_USEC USEC_PER_SEC
/* Suspended requests (waiters of the local API) hold a connection each:
 * they are capped well below the connection limit, so that there is always
 * room for a probe or a request that answers at once. */
#define HTTP_SUSPENDED_MAX 256u

/* A connection MHD holds, oldest wait first in the server's list. */
typedef struct HttpConnection HttpConnection;
struct HttpConnection {
        int fd;
        uint64_t waiting_since; /* opened, or last request answered */
        bool cut;               /* shut down by us: MHD closes it next */
        bool suspended;         /* its request is answered later: no deadline meanwhile */
        HttpConnection *prev, *next;
};

typedef struct HttpRoute {
        char *path;
        bool prefix;
        http_handler_t handler;                 /* or */
        http_request_handler_t request_handler;
        void *userdata;
} HttpRoute;

struct HttpRequest {
        HttpServer *server;
        struct MHD_Connection *conn;
        char *path;
        struct MHD_Response *response; /* ready, to be queued when MHD calls again */
        unsigned status;
        bool replied, suspended;
        bool resumed; /* answered after a suspension, not yet sent whole */
        http_request_abandoned_t abandoned;
        void *abandoned_userdata;
        sd_event_source *hangup;  /* while suspended: the client closing its end */
        HttpRequest *prev, *next; /* in the server's list of suspended requests */
};

struct HttpServer {
        sd_event *event;
        struct MHD_Daemon *daemon;
        sd_event_source *io;
        sd_event_source *timer;
        sd_event_source *sweep;
        HttpConnection *oldest, *newest;
        unsigned n_connections;
        HttpRoute *routes;
        size_t n_routes;
        unsigned n_suspended;
        unsigned n_resumed;     /* answers of suspended requests on their way out */
        HttpRequest *suspended; /* answered before MHD stops: MHD may not stop with any */
        char *address;
        ApiSocketFile unix_file; /* the socket file to remove at the end; .name NULL: TCP */
        unsigned n_hung_up;      /* suspended requests whose client went away */
        unsigned port;
};

static int format_address(const struct sockaddr_storage *sa, char **ret, unsigned *ret_port) {
        char host[INET6_ADDRSTRLEN];
        unsigned port;
        int n;

        if (sa->ss_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) sa;
                if (!inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host))
                        return -errno;
                port = ntohs(in6->sin6_port);
                n = asprintf(ret, "[%s]:%u", host, port);
        } else {
                const struct sockaddr_in *in = (const struct sockaddr_in *) sa;
                if (!inet_ntop(AF_INET, &in->sin_addr, host, sizeof host))
                        return -errno;
                port = ntohs(in->sin_port);
                n = asprintf(ret, "%s:%u", host, port);
        }
        if (n < 0)
                return -ENOMEM;
        *ret_port = port;
        return 0;
}

/* Binding here rather than in MHD gives the caller the real errno
 * (EADDRINUSE, EADDRNOTAVAIL, EACCES) to report. */
static int bind_listen_socket(const char *listen_address, char **ret_address, unsigned *ret_port) {
        struct sockaddr_storage sa, bound = {};
        socklen_t len, bound_len = sizeof bound;
        _cleanup_close_ int fd = -1;
        const int one = 1;
        int r;

        r = parse_listen_address(listen_address, &sa, &len);
        if (r < 0)
                return log_error_errno(r, "Invalid [metrics] listen address \"%s\"", listen_address);
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create a socket for %s: %m", listen_address);
        /* A restart must not wait for the previous process's TIME_WAIT
         * connections; a live listener still makes bind() fail. */
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                return log_error_errno(errno, "Failed to set SO_REUSEADDR for %s: %m", listen_address);
        if (sa.ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)
                return log_error_errno(errno, "Failed to set IPV6_V6ONLY for %s: %m", listen_address);
        if (bind(fd, (struct sockaddr *) &sa, len) < 0)
                return log_error_errno(errno, "Failed to bind the metrics endpoint to %s: %m",
                                       listen_address);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(errno, "Failed to listen on %s: %m", listen_address);
        if (getsockname(fd, (struct sockaddr *) &bound, &bound_len) < 0)
                return log_error_errno(errno, "Failed to read the address bound for %s: %m", listen_address);
        r = format_address(&bound, ret_address, ret_port);
        if (r < 0)
                return r;
        return TAKE_FD(fd);
}

/* ---- connections ------------------------------------------------------------------ */

static uint64_t now_usec(HttpServer *s) {
        uint64_t now = 0;
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        return now;
}

static void connection_unlink(HttpServer *s, HttpConnection *c) {
        if (c->prev)
                c->prev->next = c->next;
        else
                s->oldest = c->next;
        if (c->next)
                c->next->prev = c->prev;
        else
                s->newest = c->prev;
        c->prev = c->next = NULL;
}

static void connection_append(HttpServer *s, HttpConnection *c) {
        c->prev = s->newest;
        c->next = NULL;
        if (s->newest)
                s->newest->next = c;
        else
                s->oldest = c;
        s->newest = c;
}

/* shutdown(2) rather than close: the descriptor stays MHD's; it sees the
 * end of the stream on its next run and closes the connection itself. */
static void connection_cut(HttpServer *s, HttpConnection *c, const char *why) {
        if (c->cut)
                return;
        c->cut = true;
        (void) shutdown(c->fd, SHUT_RDWR);
        log_debug("HTTP server: closing a connection (%s)", why);
}

static void cut_expired(HttpServer *s) {
        uint64_t now = now_usec(s);
        unsigned live = 0;

        for (HttpConnection *c = s->oldest; c; c = c->next)
                live += !c->cut;
        for (HttpConnection *c = s->oldest; c; c = c->next) {
                if (c->cut || c->suspended)
                        continue;
                if (now >= c->waiting_since + HTTP_REQUEST_DEADLINE_USEC)
                        connection_cut(s, c, "no complete request in time");
                else if (live > HTTP_EVICT_ABOVE)
                        connection_cut(s, c, "too many connections: the one waiting longest goes");
                else
                        break; /* the rest waited less */
                live--;
        }
}

static int on_sweep(sd_event_source *source, uint64_t usec, void *userdata) {
        HttpServer *s = userdata;
        cut_expired(s);
        if (s->n_connections > 0) {
                (void) sd_event_source_set_time_relative(source, HTTP_SWEEP_USEC);
                (void) sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
        }
        return 0;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
        HttpServer *s = cls;
        HttpConnection *c = *socket_context;

        if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
                if (c) {
                        connection_unlink(s, c);
                        free(c);
                        s->n_connections--;
                }
                *socket_context = NULL;
                return;
        }
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = calloc(1, sizeof *c);
        if (!c || !info) {
                free(c);
                return; /* untracked: MHD's idle timeout still ends it */
        }
        c->fd = info->connect_fd;
        c->waiting_since = now_usec(s);
        connection_append(s, c);
        s->n_connections++;
        *socket_context = c;
        if (s->n_connections > HTTP_EVICT_ABOVE)
                cut_expired(s);
        if (s->sweep && sd_event_source_get_enabled(s->sweep, NULL) == 0) {
                (void) sd_event_source_set_time_relative(s->sweep, HTTP_SWEEP_USEC);
                (void) sd_event_source_set_enabled(s->sweep, SD_EVENT_ONESHOT);
        }
}

/* A request arrived whole: the connection waits for its next one from now. */
static void connection_served(HttpServer *s, struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        HttpConnection *c = info ? info->socket_context : NULL;

        if (!c || c->cut)
                return;
        c->waiting_since = now_usec(s);
        connection_unlink(s, c);
        connection_append(s, c);
}

static const HttpRoute *find_route(const HttpServer *s, const char *path) {
        const HttpRoute *best = NULL;

        for (size_t i = 0; i < s->n_routes; i++) {
                const HttpRoute *r = &s->routes[i];
                if (streq(r->path, path) && !r->prefix)
                        return r;
                if (r->prefix && strncmp(path, r->path, strlen(r->path)) == 0 &&
                    (!best || strlen(r->path) > strlen(best->path)))
                        best = r;
        }
        return best;
}

static HttpConnection *connection_of(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return info ? info->socket_context : NULL;
}

/* Queues body (freed here whatever happens when owned) with its status. */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, char *body, size_t size,
                               bool owned, const char *content_type, bool allow_header) {
        struct MHD_Response *response;
        enum MHD_Result ret;

        response = MHD_create_response_from_buffer(size, body,
                                                   owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!response) {
                if (owned)
                        free(body);
                return MHD_NO;
        }
        if (MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) != MHD_YES ||
            (allow_header &&
             MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD") != MHD_YES)) {
                MHD_destroy_response(response);
                return MHD_NO;
        }
        ret = MHD_queue_response(conn, status, response);
        MHD_destroy_response(response);
        return ret;
}

static enum MHD_Result respond_static(struct MHD_Connection *conn, unsigned status, const char *text,
                                      bool allow_header) {
        return respond(conn, status, (char *) text, strlen(text), false, "text/plain; charset=utf-8",
                       allow_header);
}

static enum MHD_Result run_route(struct MHD_Connection *conn, const HttpRoute *route, const char *method) {
        const char *content_type = "text/plain; charset=utf-8";
        char *body = NULL;
        size_t size = 0;
        FILE *f;
        int r;

        f = open_memstream(&body, &size);
        if (!f) {
                log_warning_errno(errno, "Failed to answer %s %s: %m", method, route->path);
                return respond_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal server error\n",
                                      false);
        }
        r = route->handler(f, &content_type, route->userdata);
        if (fclose(f) != 0 && r >= 0)
                r = -errno;
        if (r >= 0 && (r < 100 || r > 599))
                r = -ERANGE;
        if (r < 0) {
                free(body);
                log_warning_errno(r, "Failed to answer %s %s: %m", method, route->path);
                return respond_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal server error\n",
                                      false);
        }
        log_debug("HTTP %s %s: %d, %zu bytes", method, route->path, r, size);
        return respond(conn, (unsigned) r, body, size, true, content_type, false);
}

static void request_unsuspend(HttpRequest *req) {
        HttpServer *s = req->server;
        HttpConnection *c = connection_of(req->conn);

        req->hangup = sd_event_source_disable_unref(req->hangup);
        if (!req->suspended)
                return;
        req->suspended = false;
        s->n_suspended--;
        if (c)
                c->suspended = false;
        if (req->prev)
                req->prev->next = req->next;
        else
                s->suspended = req->next;
        if (req->next)
                req->next->prev = req->prev;
        req->prev = req->next = NULL;
}

static HttpRequest *request_free(HttpRequest *req) {
        if (!req)
                return NULL;
        sd_event_source_disable_unref(req->hangup);
        if (req->response)
                MHD_destroy_response(req->response);
        free(req->path);
        free(req);
        return NULL;
}

static enum MHD_Result run_request_route(struct MHD_Connection *conn, const HttpRoute *route, const char *url,
                                         const char *method, void **con_cls, HttpServer *s) {
        HttpRequest *req;
        int r;

        req = calloc(1, sizeof *req);
        if (!req || !(req->path = strdup(url))) {
                request_free(req);
                return respond_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal server error\n", false);
        }
        req->server = s;
        req->conn = conn;
        *con_cls = req; /* freed when MHD says the request completed */
        r = route->request_handler(req, route->userdata);
        if (req->suspended)
                return MHD_YES;
        if (r < 0 && !req->response) {
                log_warning_errno(r, "Failed to answer %s %s: %m", method, url);
                return respond_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal server error\n", false);
        }
        if (!req->response) {
                log_warning("HTTP %s %s: the handler gave no answer", method, url);
                return respond_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal server error\n", false);
        }
        return MHD_queue_response(conn, req->status, req->response);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
        HttpServer *s = cls;
        const HttpRoute *route;
        HttpRequest *req = *con_cls;

        /* Called again for a request resumed after its answer was made. */
        if (req) {
                if (!req->response)
                        return MHD_NO;
                return MHD_queue_response(conn, req->status, req->response);
        }
        connection_served(s, conn);
        /* Every answer is queued on the first call: no route takes a body. */
        if (!streq(method, MHD_HTTP_METHOD_GET) && !streq(method, MHD_HTTP_METHOD_HEAD)) {
                log_debug("HTTP %s %s: 405", method, url);
                return respond_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", true);
        }
        route = find_route(s, url);
        if (!route) {
                log_debug("HTTP %s %s: 404", method, url);
                return respond_static(conn, MHD_HTTP_NOT_FOUND, "404 page not found\n", false);
        }
        /* MHD leaves the body out of a HEAD answer but keeps its length. */
        if (route->request_handler)
                return run_request_route(conn, route, url, method, con_cls, s);
        return run_route(conn, route, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
        HttpServer *s = cls;
        HttpRequest *req = *con_cls;

        if (!req)
                return;
        *con_cls = NULL;
        if (req->resumed)
                s->n_resumed--;
        if (req->suspended) {
                /* Never answered: the server goes away with it. */
                request_unsuspend(req);
                if (req->abandoned)
                        req->abandoned(req, req->abandoned_userdata);
        }
        request_free(req);
}

_printf_(2, 0) static void on_mhd_log(void *cls, const char *format, va_list ap) {
        char text[512];
        size_t n;

        (void) vsnprintf(text, sizeof text, format, ap);
        n = strlen(text);
        while (n > 0 && text[n - 1] == '\n')
                text[--n] = '\0';
        /* MHD reports clients that misbehave or go away: not the agent's errors. */
        log_debug("HTTP server: %s", text);
}

static int http_server_process(HttpServer *s);

static int on_io(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        return http_server_process(userdata);
}

static int on_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        return http_server_process(userdata);
}

/* MHD must run again within MHD_get_timeout(): at once when it has buffered
 * work the epoll fd does not show, or to drop idle connections. */
static int arm_timer(HttpServer *s) {
        MHD_UNSIGNED_LONG_LONG timeout_ms;
        uint64_t now;
        int r;

        if (MHD_get_timeout(s->daemon, &timeout_ms) != MHD_YES)
                return s->timer ? sd_event_source_set_enabled(s->timer, SD_EVENT_OFF) : 0;
        r = sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return r;
        uint64_t when = now + MIN((uint64_t) timeout_ms, UINT64_MAX / USEC_PER_MSEC / 2) * USEC_PER_MSEC;
        if (!s->timer) {
                /* Accuracy 1 µs: sd-event's default (0) lets a timer slip by up to
                 * 250 ms, and "0 ms" from MHD means data is waiting now. */
                r = sd_event_add_time(s->event, &s->timer, CLOCK_MONOTONIC, when, 1, on_timer, s);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_description(s->timer, "http-timer");
                return 0;
        }
        r = sd_event_source_set_time(s->timer, when);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(s->timer, SD_EVENT_ONESHOT);
}

static void wake_now(HttpServer *s) {
        uint64_t now;

        if (!s->timer)
                return; /* stopping: MHD runs once more before it stops */
        if (sd_event_now(s->event, CLOCK_MONOTONIC, &now) < 0 ||
            sd_event_source_set_time(s->timer, now) < 0 ||
            sd_event_source_set_enabled(s->timer, SD_EVENT_ONESHOT) < 0)
                log_warning("HTTP server: cannot run at once; a resumed answer waits for the next event");
}

static int http_server_process(HttpServer *s) {
        int r;

        if (MHD_run(s->daemon) != MHD_YES)
                log_debug("MHD_run() failed");
        r = arm_timer(s);
        if (r < 0)
                /* Without the timer MHD still runs on every socket event: degraded, not dead. */
                log_warning_errno(r, "Failed to arm the HTTP server timer: %m");
        return 0;
}

static int http_server_start(HttpServer *s, int fd);

int http_server_new(sd_event *event, const char *listen_address, HttpServer **ret) {
        _cleanup_(http_server_freep) HttpServer *s = NULL;
        int fd, r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->unix_file.dir_fd = -1;
        s->event = sd_event_ref(event);

        fd = bind_listen_socket(listen_address, &s->address, &s->port);
        if (fd < 0)
                return fd;
        r = http_server_start(s, fd);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int http_server_new_unix(sd_event *event, const char *path, gid_t gid, HttpServer **ret) {
        _cleanup_(http_server_freep) HttpServer *s = NULL;
        int fd, r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->unix_file.dir_fd = -1;
        s->event = sd_event_ref(event);
        s->address = strdup(path);
        if (!s->address)
                return -ENOMEM;
        fd = api_socket_bind(path, gid, &s->unix_file);
        if (fd < 0)
                return fd;
        r = http_server_start(s, fd);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

static int http_server_start(HttpServer *s, int fd) {
        const union MHD_DaemonInfo *info;
        sd_event *event = s->event;
        int r;

        /* External epoll: no MHD thread, the agent's loop drives MHD_run().
         * MHD owns the listening socket from here on, also when it fails.
         * Suspend/resume: a request answered later holds no thread; its
         * resume wakes the loop through MHD's own pipe in the epoll set. */
        /* clang-format off */
        s->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME,
                                     0, NULL, NULL, on_request, s,
                                     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                                     MHD_OPTION_LISTEN_SOCKET, (MHD_socket) fd,
                                     MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNECTION_LIMIT,
                                     MHD_OPTION_CONNECTION_TIMEOUT, HTTP_CONNECTION_TIMEOUT_SEC,
                                     MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                     MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                     MHD_OPTION_END);
        /* clang-format on */
        if (!s->daemon)
                return log_error_errno(EIO, "Failed to start the HTTP server on %s", s->address);
        info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        if (!info || info->epoll_fd < 0)
                return log_error_errno(EIO, "The HTTP server on %s has no epoll fd", s->address);
        r = sd_event_add_io(event, &s->io, info->epoll_fd, EPOLLIN, on_io, s);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the HTTP server on %s: %m", s->address);
        (void) sd_event_source_set_description(s->io, "http-server");
        /* Before the CSI answers and passes pending in the same iteration:
         * sd-event dispatches one source at a time, and a probe must not
         * queue behind a recovery's hundreds of completions.  Its requests
         * are few and short (a liveness probe, a scrape). */
        (void) sd_event_source_set_priority(s->io, SD_EVENT_PRIORITY_IMPORTANT);
        r = sd_event_add_time_relative(event, &s->sweep, CLOCK_MONOTONIC, HTTP_SWEEP_USEC, USEC_PER_MSEC, on_sweep,
                                       s);
        if (r < 0)
                return log_error_errno(r, "Failed to add the HTTP connection sweep: %m");
        (void) sd_event_source_set_enabled(s->sweep, SD_EVENT_OFF);
        (void) sd_event_source_set_description(s->sweep, "http-sweep");
        r = arm_timer(s);
        if (r < 0)
                return log_error_errno(r, "Failed to arm the HTTP server timer: %m");
        return 0;
}

HttpServer *http_server_free(HttpServer *s) {
        if (!s)
                return NULL;
        s->io = sd_event_source_disable_unref(s->io);
        s->timer = sd_event_source_disable_unref(s->timer);
        s->sweep = sd_event_source_disable_unref(s->sweep);
        /* While MHD still holds the listening socket: the file's inode
         * cannot have been reused by another socket yet. */
        api_socket_file_done(&s->unix_file);
        if (s->daemon) {
                /* MHD must not stop with a suspended connection: each waiter
                 * left gets its answer, and MHD runs once to send them. */
                while (s->suspended) {
                        HttpRequest *req = s->suspended;
                        http_request_abandoned_t abandoned = req->abandoned;
                        void *userdata = req->abandoned_userdata;
                        static const char gone[] = "{\"error\":\"kvolumed is stopping\"}";
                        char *body = strdup(gone);

                        req->abandoned = NULL;
                        if (body)
                                (void) http_request_reply(req, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", body,
                                                          strlen(gone));
                        else
                                request_unsuspend(req), MHD_resume_connection(req->conn);
                        if (abandoned)
                                abandoned(req, userdata);
                }
                /* Until those answers are out (MHD takes a resumed
                 * connection back, then writes): a second at most. */
                const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
                for (unsigned i = 0; i < 100 && s->n_resumed > 0; i++) {
                        (void) MHD_run(s->daemon);
                        if (s->n_resumed > 0 && info)
                                (void) poll(&(struct pollfd){ .fd = info->epoll_fd, .events = POLLIN }, 1, 10);
                }
                MHD_stop_daemon(s->daemon); /* its CLOSED notifications free the connections */
        }
        while (s->oldest) {
                HttpConnection *c = s->oldest;
                connection_unlink(s, c);
                free(c);
        }
        for (size_t i = 0; i < s->n_routes; i++)
                free(s->routes[i].path);
        free(s->routes);
        free(s->address);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

static int add_route(HttpServer *s, const char *path, bool prefix, http_handler_t handler,
                     http_request_handler_t request_handler, void *userdata) {
        HttpRoute *routes;
        char *copy;

        if (!s || isempty(path) || path[0] != '/' || (!handler == !request_handler))
                return -EINVAL;
        for (size_t i = 0; i < s->n_routes; i++)
                if (streq(s->routes[i].path, path) && s->routes[i].prefix == prefix)
                        return -EEXIST;
        copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        routes = reallocarray(s->routes, s->n_routes + 1, sizeof *routes);
        if (!routes) {
                free(copy);
                return -ENOMEM;
        }
        s->routes = routes;
        s->routes[s->n_routes++] = (HttpRoute){ .path = copy, .prefix = prefix, .handler = handler,
                                                .request_handler = request_handler, .userdata = userdata };
        return 0;
}

int http_server_add_route(HttpServer *s, const char *path, http_handler_t handler, void *userdata) {
        return add_route(s, path, false, handler, NULL, userdata);
}

int http_server_add_request_route(HttpServer *s, const char *path, bool prefix, http_request_handler_t handler,
                                  void *userdata) {
        return add_route(s, path, prefix, NULL, handler, userdata);
}

const char *http_request_path(const HttpRequest *req) {
        return req->path;
}

const char *http_request_arg(HttpRequest *req, const char *key) {
        return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

typedef struct UnknownArg {
        const char *const *known;
        const char *found;
} UnknownArg;

static enum MHD_Result find_unknown_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        UnknownArg *u = cls;
        for (const char *const *k = u->known; *k; k++)
                if (streq(*k, key))
                        return MHD_YES;
        u->found = key;
        return MHD_NO;
}

const char *http_request_unknown_arg(HttpRequest *req, const char *const *known) {
        UnknownArg u = { .known = known };
        (void) MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, find_unknown_arg, &u);
        return u.found;
}

int http_request_reply(HttpRequest *req, unsigned status, const char *content_type, char *body, size_t size) {
        struct MHD_Response *response;

        if (req->replied) {
                free(body);
                return -EALREADY;
        }
        req->replied = true;
        response = MHD_create_response_from_buffer(size, body, MHD_RESPMEM_MUST_FREE);
        if (!response) {
                free(body);
                /* An empty 500 rather than a connection suspended for ever. */
                response = MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
                status = MHD_HTTP_INTERNAL_SERVER_ERROR;
                if (!response)
                        return -ENOMEM;
        } else if (MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) != MHD_YES)
                log_debug("HTTP: failed to add the content type");
        req->response = response;
        req->status = status;
        log_debug("HTTP GET %s: %u, %zu bytes%s", req->path, status, size, req->suspended ? " (resumed)" : "");
        if (req->suspended) {
                request_unsuspend(req);
                req->resumed = true;
                req->server->n_resumed++;
                /* Answered now: the request deadline counts from here, not
                 * from when the wait began. */
                connection_served(req->server, req->conn);
                MHD_resume_connection(req->conn);
                /* MHD takes the resumed connection back on its next run:
                 * run it from the loop right away (not from here, which may
                 * be inside another module's callback). */
                wake_now(req->server);
        }
        return 0;
}

/* MHD does not watch a suspended connection: without this, a client that
 * gave up (a runner with a shorter timeout, one that restarted) would keep
 * its slot until its own timeout, up to 10 minutes, and HTTP_SUSPENDED_MAX
 * of them would turn every wait away.  The socket is watched for nothing
 * but EPOLLHUP and EPOLLERR, which epoll always reports: on a unix stream
 * socket EPOLLHUP means the client closed its end for good.  A client that
 * only shut down its sending side (shutdown(SHUT_WR) after its request; an
 * HTTP/1.0 habit) still reads: that gives EPOLLRDHUP alone, which is not
 * asked for, so it keeps waiting for its answer.  (Over TCP a close shows
 * as EPOLLRDHUP only: such a wait ends at its timeout; only the unix
 * socket's local API suspends requests.)  The slot is freed at once, the
 * waiter told, and the connection resumed without an answer, which makes
 * MHD close and free it. */
static int on_hangup(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        HttpRequest *req = userdata;
        HttpServer *s = req->server;
        http_request_abandoned_t abandoned = req->abandoned;
        void *abandoned_userdata = req->abandoned_userdata;

        req->abandoned = NULL;
        request_unsuspend(req); /* drops this source: sd-event allows it in its own callback */
        s->n_hung_up++;
        log_debug("HTTP GET %s: the client went away while waiting (%s%s); %u waiting, %u gone so far",
                  req->path, (revents & EPOLLHUP) ? "hang-up" : "", (revents & EPOLLERR) ? " error" : "",
                  s->n_suspended, s->n_hung_up);
        if (abandoned)
                abandoned(req, abandoned_userdata);
        req->resumed = true;
        s->n_resumed++;
        MHD_resume_connection(req->conn);
        wake_now(s);
        return 0;
}

int http_request_suspend(HttpRequest *req, http_request_abandoned_t abandoned, void *userdata) {
        HttpServer *s = req->server;
        const union MHD_ConnectionInfo *info;
        HttpConnection *c;
        int r;

        if (req->replied || req->suspended)
                return -EINVAL;
        if (s->n_suspended >= HTTP_SUSPENDED_MAX)
                return -EBUSY;
        info = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!info)
                return -EBADF;
        r = sd_event_add_io(s->event, &req->hangup, info->connect_fd, 0, on_hangup, req);
        if (r < 0)
                return log_warning_errno(r, "HTTP GET %s: cannot watch the connection while it waits: %m",
                                         req->path);
        (void) sd_event_source_set_description(req->hangup, "http-wait-hangup");
        c = connection_of(req->conn);
        if (c)
                c->suspended = true;
        req->suspended = true;
        req->abandoned = abandoned;
        req->abandoned_userdata = userdata;
        req->next = s->suspended;
        if (s->suspended)
                s->suspended->prev = req;
        s->suspended = req;
        s->n_suspended++;
        MHD_suspend_connection(req->conn);
        return 0;
}

const char *http_server_address(HttpServer *s) {
        return s->address;
}

unsigned http_server_port(HttpServer *s) {
        return s->port;
}
