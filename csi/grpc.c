/* SPDX-License-Identifier: Apache-2.0 */
/* Unary and server-streaming gRPC over libcurl: one easy handle per call,
 * HTTP/2 with prior knowledge on the driver's unix socket.  See
 * shared/reference/grpc-over-libcurl.md for the settings and the libcurl 7.88
 * connection-reuse bug this file designs around. */
#include <ctype.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>

#include "csi/grpc.h"
#include "systemd/curl-loop.h"
#include "systemd/log.h"
#include "systemd/trace.h"

/* The backstop timeout given to curl is this much beyond our own deadline
 * timer, which is the one that normally ends a call that runs too long. */
#define CURL_BACKSTOP_MSEC 1000

/* How many times a call is asked again after its server ended it before
 * its request was sent (call_ended_unsent). */
#define UNSENT_RETRIES 2

/* The smallest receive buffer given to libcurl before 8.1.0: twice the
 * 32 KiB it reads from the socket at a time for HTTP/2 (see
 * curl_strands_h2_input()). */
#define H2_SAFE_RECEIVE_BUFFER (64u * 1024u)

typedef enum CallState {
        CALL_QUEUED,
        CALL_RUNNING,
} CallState;

struct GrpcTransport {
        sd_event *event;
        CurlLoop *loop;
        size_t max_receive;
        size_t receive_buffer; /* 0: curl's default */
        size_t stream_buffer; /* the same for streams */
        bool reuse;
        char *user_agent;
        GrpcCall *calls; /* every call not yet completed, so that free can cancel them */
};

struct GrpcChannel {
        unsigned n_ref;
        GrpcTransport *transport;
        char *socket_path;
        unsigned max_parallel;
        unsigned in_flight;
        unsigned queued;
        GrpcCall *queue_head, *queue_tail;
};

struct GrpcCall {
        GrpcTransport *transport;
        GrpcChannel *channel; /* a reference */
        GrpcCall *t_prev, *t_next;
        GrpcCall *q_prev, *q_next;
        CallState state;

        char *url;
        uint8_t *request; /* prefix + message */
        size_t request_size;
        uint64_t start_usec;
        uint64_t trace_usec; /* test_trace_now() at curl_loop_add() */
        uint64_t deadline_usec; /* CLOCK_MONOTONIC; 0: none */
        sd_event_source *timer;
        grpc_call_done_t done;
        void *userdata;

        CURL *easy;
        struct curl_slist *headers;
        uint8_t *body;
        size_t body_size, body_alloc;
        long http_status;
        int grpc_status; /* -1: not received */
        char *grpc_message;
        bool too_big;
        unsigned unsent_retries;
        char errbuf[CURL_ERROR_SIZE];

        /* A server-streaming call: body holds the bytes not yet delivered. */
        bool stream;
        bool ended; /* curl is done with it; end_code/end_message wait for the messages before them */
        grpc_stream_message_t on_message;
        sd_event_source *deliver; /* defer source: messages and the end reach the owner from the loop */
        CsiCode end_code;
        char *end_message;
};

static uint64_t now_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* curl bug 10634: libcurl before 8.0.0 fails the second request on a reused
 * prior-knowledge h2c connection with CURLE_HTTP2. */
static bool curl_can_reuse_h2c(void) {
        const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
        return v && v->version_num >= 0x080000;
}

/* libcurl before 8.1.0 (Debian 12's 7.88) reads HTTP/2 input 32 KiB at a
 * time, and hands a stream's DATA to its transfer through the transfer's
 * receive buffer (CURLOPT_BUFFERSIZE, 16 KiB by default).  When one read
 * brings more DATA than that buffer holds, nghttp2 is paused; on resuming
 * curl serves the paused bytes but leaves the frames after them in its
 * connection buffer without arming a timer, and its check for input still
 * buffered is inverted (lib/http2.c, cf_h2_data_pending()).  On the multi
 * socket interface the transfer then runs again only on a socket event or
 * a timer: when the rest of the answer (its last DATA, the grpc-status
 * trailers) was in that read, nothing more comes, and the call waits until
 * its deadline.  Within 200 ms of the connect the happy-eyeballs timer
 * still wakes it (a stall of "some 200 ms"); an answer that takes longer
 * to arrive (a 4 MiB answer from a loaded driver) stalls for good.  Fixed
 * by curl 8.1.0's new HTTP/2 buffering.  A receive buffer larger than one
 * read never pauses nghttp2, so no input is ever stranded. */
static bool curl_strands_h2_input(void) {
        const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
        return !v || v->version_num < 0x080100;
}

int grpc_transport_new(sd_event *event, const GrpcTransportOptions *o, GrpcTransport **ret) {
        _cleanup_(grpc_transport_freep) GrpcTransport *t = NULL;
        CURLM *multi;
        int r;

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->event = sd_event_ref(event);
        t->max_receive = o && o->max_receive_bytes ? o->max_receive_bytes : GRPC_DEFAULT_MAX_RECEIVE;
        t->receive_buffer = o ? MIN(o->receive_buffer_bytes, (size_t) CURL_MAX_READ_SIZE) : 0;
        if (curl_strands_h2_input()) {
                t->receive_buffer = MAX(t->receive_buffer, (size_t) H2_SAFE_RECEIVE_BUFFER);
                t->stream_buffer = H2_SAFE_RECEIVE_BUFFER;
        }
        t->reuse = (!o || o->reuse == CSI_CONNECTION_REUSE_AUTO) && curl_can_reuse_h2c();
        t->user_agent = strdup(o && o->user_agent ? o->user_agent : "kvolumed/" KVOLUMED_VERSION);
        if (!t->user_agent)
                return -ENOMEM;
        r = curl_loop_new(event, &t->loop);
        if (r < 0)
                return r;
        multi = curl_loop_multi(t->loop);
        if (curl_multi_setopt(multi, CURLMOPT_PIPELINING, t->reuse ? CURLPIPE_MULTIPLEX : CURLPIPE_NOTHING) !=
            CURLM_OK)
                return -EIO;
        *ret = TAKE_PTR(t);
        return 0;
}

bool grpc_transport_reuses_connections(GrpcTransport *t) {
        return t->reuse;
}

static void call_unlink_transport(GrpcCall *c) {
        if (c->t_prev)
                c->t_prev->t_next = c->t_next;
        else if (c->transport->calls == c)
                c->transport->calls = c->t_next;
        if (c->t_next)
                c->t_next->t_prev = c->t_prev;
        c->t_prev = c->t_next = NULL;
}

static void queue_remove(GrpcChannel *ch, GrpcCall *c) {
        if (c->q_prev)
                c->q_prev->q_next = c->q_next;
        else
                ch->queue_head = c->q_next;
        if (c->q_next)
                c->q_next->q_prev = c->q_prev;
        else
                ch->queue_tail = c->q_prev;
        c->q_prev = c->q_next = NULL;
        ch->queued--;
}

static void queue_append(GrpcChannel *ch, GrpcCall *c) {
        c->q_next = NULL;
        c->q_prev = ch->queue_tail;
        if (ch->queue_tail)
                ch->queue_tail->q_next = c;
        else
                ch->queue_head = c;
        ch->queue_tail = c;
        ch->queued++;
}

static GrpcCall *call_free(GrpcCall *c) {
        if (!c)
                return NULL;
        sd_event_source_disable_unref(c->timer);
        /* Safe from its own callback: sd-event frees a dispatching source afterwards. */
        sd_event_source_disable_unref(c->deliver);
        free(c->end_message);
        if (c->easy)
                curl_easy_cleanup(c->easy);
        curl_slist_free_all(c->headers);
        grpc_channel_unref(c->channel);
        free(c->url);
        if (c->request)
                /* It may carry secrets and service account tokens. */
                explicit_bzero(c->request, c->request_size);
        free(c->request);
        free(c->body);
        free(c->grpc_message);
        free(c);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(GrpcCall *, call_free);

/* Takes the call off the queue or off curl and out of every list; it is then
 * only the caller's.  A running call frees its slot on the channel. */
static void call_detach(GrpcCall *c) {
        if (c->stream) {
                /* Not counted on the channel; once ended, curl has let go already. */
                if (!c->ended)
                        (void) curl_loop_cancel(c->transport->loop, c->easy);
        } else if (c->state == CALL_QUEUED)
                queue_remove(c->channel, c);
        else {
                (void) curl_loop_cancel(c->transport->loop, c->easy);
                c->channel->in_flight--;
        }
        call_unlink_transport(c);
        c->timer = sd_event_source_disable_unref(c->timer);
}

GrpcTransport *grpc_transport_free(GrpcTransport *t) {
        if (!t)
                return NULL;
        while (t->calls) {
                GrpcCall *c = t->calls;
                call_detach(c);
                call_free(c);
        }
        curl_loop_free(t->loop);
        sd_event_unref(t->event);
        free(t->user_agent);
        free(t);
        return NULL;
}

int grpc_channel_new(GrpcTransport *t, const char *socket_path, unsigned max_parallel, GrpcChannel **ret) {
        GrpcChannel *ch;

        if (!t || isempty(socket_path) || max_parallel == 0)
                return -EINVAL;
        ch = calloc(1, sizeof *ch);
        if (!ch)
                return -ENOMEM;
        *ch = (GrpcChannel){ .n_ref = 1, .transport = t, .max_parallel = max_parallel };
        ch->socket_path = strdup(socket_path);
        if (!ch->socket_path) {
                free(ch);
                return -ENOMEM;
        }
        *ret = ch;
        return 0;
}

GrpcChannel *grpc_channel_ref(GrpcChannel *ch) {
        if (ch)
                ch->n_ref++;
        return ch;
}

GrpcChannel *grpc_channel_unref(GrpcChannel *ch) {
        if (!ch || --ch->n_ref > 0)
                return NULL;
        free(ch->socket_path);
        free(ch);
        return NULL;
}

const char *grpc_channel_socket_path(GrpcChannel *ch) {
        return ch->socket_path;
}

static void channel_dispatch(GrpcChannel *ch);

void grpc_channel_set_max_parallel(GrpcChannel *ch, unsigned max_parallel) {
        if (max_parallel == 0)
                return;
        ch->max_parallel = max_parallel;
        channel_dispatch(ch);
}

unsigned grpc_channel_in_flight(GrpcChannel *ch) {
        return ch->in_flight;
}

unsigned grpc_channel_queued(GrpcChannel *ch) {
        return ch->queued;
}

static size_t on_header(char *data, size_t size, size_t n, void *userdata) {
        GrpcCall *c = userdata;
        size_t len = size * n, name_len;
        const char *colon, *value, *end = data + len;

        while (end > data && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
                end--;
        if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
                /* Not strtol(): the line is not NUL-terminated, and strtol skips
                 * whitespace (the CRLF) and reads on past its end. */
                const char *sp = memchr(data, ' ', (size_t) (end - data));
                long status = 0;
                for (const char *p = sp ? sp + 1 : end; p < end && *p >= '0' && *p <= '9' && status < 1000; p++)
                        status = status * 10 + (*p - '0');
                c->http_status = status;
                return len;
        }
        colon = memchr(data, ':', (size_t) (end - data));
        if (!colon)
                return len;
        name_len = (size_t) (colon - data);
        value = colon + 1;
        while (value < end && (*value == ' ' || *value == '\t'))
                value++;

        if (name_len == 11 && strncasecmp(data, "grpc-status", 11) == 0)
                c->grpc_status = (int) grpc_code_parse(value, (size_t) (end - value));
        else if (name_len == 12 && strncasecmp(data, "grpc-message", 12) == 0) {
                free(c->grpc_message);
                c->grpc_message = grpc_percent_decode(value, (size_t) (end - value));
                if (!c->grpc_message)
                        return 0;
        }
        return len;
}

/* A stream's bytes are kept until the loop delivers their messages: never
 * from inside curl, where the owner could neither start nor cancel a call. */
static size_t on_stream_body(GrpcCall *c, const char *data, size_t len) {
        size_t need = c->body_size + len;
        /* Room for a few messages that arrive within one read, never unbounded. */
        size_t limit = 2 * (c->transport->max_receive + GRPC_FRAME_HEADER);

        if (need > limit) {
                c->too_big = true;
                return 0;
        }
        if (need > c->body_alloc) {
                size_t a = MIN(limit, MAX(need, MAX((size_t) 256, c->body_alloc * 2)));
                uint8_t *b = realloc(c->body, a);
                if (!b)
                        return 0;
                c->body = b;
                c->body_alloc = a;
        }
        memcpy(c->body + c->body_size, data, len);
        c->body_size = need;
        (void) sd_event_source_set_enabled(c->deliver, SD_EVENT_ONESHOT);
        return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
        GrpcCall *c = userdata;
        size_t len = size * n, need = c->body_size + len;
        size_t limit = c->transport->max_receive + GRPC_FRAME_HEADER;

        if (c->stream)
                return on_stream_body(c, data, len);

        if (need > limit) {
                c->too_big = true;
                return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
        }
        if (need > c->body_alloc) {
                size_t a = MAX(need, MIN(limit, MAX((size_t) 256, c->body_alloc * 2)));
                /* Once the prefix is in, reserve the whole message at once. */
                if (need >= GRPC_FRAME_HEADER && c->body_size < GRPC_FRAME_HEADER) {
                        uint8_t p[GRPC_FRAME_HEADER];
                        size_t have = c->body_size;
                        if (have > 0) /* nothing received yet: c->body may be NULL */
                                memcpy(p, c->body, have);
                        memcpy(p + have, data, GRPC_FRAME_HEADER - have);
                        uint32_t declared = (uint32_t) p[1] << 24 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 8 | p[4];
                        if (declared > c->transport->max_receive) {
                                c->too_big = true;
                                return 0;
                        }
                        a = MAX(a, (size_t) declared + GRPC_FRAME_HEADER);
                }
                uint8_t *b = realloc(c->body, a);
                if (!b)
                        return 0;
                c->body = b;
                c->body_alloc = a;
        }
        memcpy(c->body + c->body_size, data, len);
        c->body_size = need;
        return len;
}

/* Hands the result to the owner and frees the call; the call is detached. */
static void call_complete(GrpcCall *c, CsiCode code, const char *message, const uint8_t *data, size_t size) {
        GrpcResult result = {
                .code = code,
                .message = strempty(message),
                .data = code == CSI_CODE_OK ? data : NULL,
                .size = code == CSI_CODE_OK ? size : 0,
                .duration_usec = now_usec() - c->start_usec,
        };
        c->done(c, &result, c->userdata);
        call_free(c);
}

static CsiCode code_from_curl(CURLcode cc) {
        switch (cc) {
        case CURLE_OPERATION_TIMEDOUT:
                return CSI_CODE_DEADLINE_EXCEEDED;
        case CURLE_OUT_OF_MEMORY:
                return CSI_CODE_RESOURCE_EXHAUSTED;
        default:
                /* Connection refused, socket missing, reset, HTTP/2 framing:
                 * the server may never have seen the call, or may have done it. */
                return CSI_CODE_UNAVAILABLE;
        }
}

/* The code and message a finished transfer ends with.  For a unary call,
 * data and size get its response message; a stream's messages went already. */
static CsiCode end_code(GrpcCall *c, CURLcode cc, char *buf, size_t bufsize, const char **message,
                        const uint8_t **data, size_t *size) {
        long os_errno = 0;
        CsiCode code;

        if (c->too_big) {
                code = CSI_CODE_RESOURCE_EXHAUSTED;
                snprintf(buf, bufsize, "grpc: received message larger than max (limit %zu bytes)",
                         c->transport->max_receive);
                *message = buf;
        } else if (cc == CURLE_COULDNT_CONNECT && c->grpc_status < 0 && c->easy &&
                   curl_easy_getinfo(c->easy, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK && os_errno > 0) {
                /* The socket's own words ("No such file or directory",
                 * "Connection refused"), not libcurl's "Failed to connect to
                 * localhost port 80": the port is a placeholder of the URL. */
                code = CSI_CODE_UNAVAILABLE;
                snprintf(buf, bufsize, "connection error on %s: connect: %s", c->channel->socket_path,
                         strerror((int) os_errno));
                *message = buf;
        } else if (cc != CURLE_OK && c->grpc_status < 0) {
                code = code_from_curl(cc);
                snprintf(buf, bufsize, "%s on %s: %s",
                         code == CSI_CODE_DEADLINE_EXCEEDED ? "deadline exceeded" : "connection error",
                         c->channel->socket_path, c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
                *message = buf;
        } else if (c->grpc_status >= 0) {
                code = (CsiCode) c->grpc_status;
                *message = c->grpc_message;
                if (code == CSI_CODE_OK && !c->stream) {
                        if (grpc_unframe(c->body, c->body_size, data, size) < 0) {
                                code = CSI_CODE_INTERNAL;
                                *message = c->body_size == 0 ? "grpc: no response message with status OK"
                                                             : "grpc: malformed or compressed response message";
                        } else
                                *message = NULL;
                } else if (code == CSI_CODE_OK)
                        *message = NULL;
        } else if (c->http_status != 200) {
                code = grpc_code_from_http_status(c->http_status);
                snprintf(buf, bufsize, "unexpected HTTP status code received from server: %ld", c->http_status);
                *message = buf;
        } else {
                code = CSI_CODE_UNKNOWN;
                *message = "grpc: server sent no grpc-status";
        }
        return code;
}

/* A server may answer a call on its headers alone (grpc-go and grpcio an
 * unknown method) and end the stream (RST_STREAM, NO_ERROR) before it read
 * the request's body.  libcurl 7.88 sends that body in a later write: when
 * it reads the answer first, it then refuses to send the body on the ended
 * stream (CURLE_HTTP2_STREAM, with no message: http2_send()'s "stream
 * closed") and the transfer fails without handing the answer over, so that
 * the call read as Unavailable, now and then, where the answer was final
 * (test_csi_client's unknown method, in CI).  The body was never sent, so
 * the server cannot have acted on the request: asked again on a new
 * connection, twice at most (a timing race is rarely lost three times).  A
 * driver that dies in a call ends the stream with an error of its own
 * ("not closed cleanly"), which is not asked again here. */
static bool call_ended_unsent(GrpcCall *c, CURLcode cc) {
        return cc == CURLE_HTTP2_STREAM && c->errbuf[0] == '\0' && !c->stream && c->http_status == 0 &&
               c->grpc_status < 0 && !c->too_big && c->unsent_retries < UNSENT_RETRIES;
}

static int call_start(GrpcCall *c);

/* The same call on a new connection: what the last attempt received goes,
 * its deadline stays. */
static int call_restart(GrpcCall *c) {
        curl_easy_cleanup(c->easy);
        c->easy = NULL;
        curl_slist_free_all(c->headers);
        c->headers = NULL;
        c->body_size = 0;
        c->http_status = 0;
        c->grpc_status = -1;
        free(c->grpc_message);
        c->grpc_message = NULL;
        c->errbuf[0] = '\0';
        c->unsent_retries++;
        c->channel->in_flight--;
        return call_start(c);
}

/* A running call's end: out of the transport's list, its deadline gone,
 * its slot on the channel given to the next queued call, then its owner told. */
static void call_end(GrpcCall *c, GrpcChannel *ch, CsiCode code, const char *message, const uint8_t *data,
                     size_t size) {
        call_unlink_transport(c);
        c->timer = sd_event_source_disable_unref(c->timer);
        channel_dispatch(ch);
        call_complete(c, code, message, data, size);
}

static void on_curl_done(CurlLoop *loop, CURL *easy, CURLcode cc, void *userdata) {
        GrpcCall *c = userdata;
        _cleanup_(grpc_channel_unrefp) GrpcChannel *ch = grpc_channel_ref(c->channel);
        char buf[CURL_ERROR_SIZE + 192];
        const uint8_t *data = NULL;
        size_t size = 0;
        CsiCode code;
        const char *message = NULL;
        int r;

        if (call_ended_unsent(c, cc)) {
                log_debug("%s on %s: the server ended the stream before its request was sent, the answer unread "
                          "(%s): asking again",
                          strrchr(c->url, '/') + 1, ch->socket_path, curl_easy_strerror(cc));
                r = call_restart(c);
                if (r >= 0)
                        return;
                /* Not started again: nothing of it runs (in_flight taken back). */
                snprintf(buf, sizeof buf, "connection error on %s: cannot ask again: %s", ch->socket_path,
                         strerror(-r));
                call_end(c, ch, CSI_CODE_UNAVAILABLE, buf, NULL, 0);
                return;
        }

        if (c->trace_usec > 0) {
                /* curl's own times of the transfer, from its start. */
                curl_off_t connect = 0, pretransfer = 0, starttransfer = 0;
                const char *method = strrchr(c->url, '/') + 1;
                (void) curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connect);
                (void) curl_easy_getinfo(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
                (void) curl_easy_getinfo(easy, CURLINFO_STARTTRANSFER_TIME_T, &starttransfer);
                test_trace_at(c->trace_usec + (uint64_t) connect, "call-connected", method);
                test_trace_at(c->trace_usec + (uint64_t) pretransfer, "call-pretransfer", method);
                test_trace_at(c->trace_usec + (uint64_t) starttransfer, "call-firstbyte", method);
                test_trace("call-done", method);
        }
        /* curl already let go of the handle: only our bookkeeping is left. */
        ch->in_flight--;
        code = end_code(c, cc, buf, sizeof buf, &message, &data, &size);
        call_end(c, ch, code, message, data, size);
}

/* A stream's transfer ended: its end waits for the messages before it. */
static void on_stream_curl_done(CurlLoop *loop, CURL *easy, CURLcode cc, void *userdata) {
        GrpcCall *c = userdata;
        char buf[CURL_ERROR_SIZE + 192];
        const uint8_t *data = NULL;
        size_t size = 0;
        const char *message = NULL;

        c->ended = true;
        c->end_code = end_code(c, cc, buf, sizeof buf, &message, &data, &size);
        c->end_message = strdup(strempty(message)); /* NULL on ENOMEM: an empty message */
        (void) sd_event_source_set_enabled(c->deliver, SD_EVENT_ONESHOT);
}

static void stream_finish(GrpcCall *c, CsiCode code, const char *message) {
        call_unlink_transport(c);
        call_complete(c, code, message, NULL, 0);
}

/* One message per dispatch, re-armed while more wait: after the owner's
 * callback, the call may be gone. */
static int on_stream_deliver(sd_event_source *s, void *userdata) {
        GrpcCall *c = userdata;
        const uint8_t *data;
        size_t size, used;
        uint8_t *copy;
        int r;

        r = grpc_next_frame(c->body, c->body_size, c->transport->max_receive, &data, &size, &used);
        if (r < 0) {
                char buf[128];
                snprintf(buf, sizeof buf,
                         r == -EMSGSIZE ? "grpc: received message larger than max (limit %zu bytes)"
                                        : "grpc: compressed message in a stream (limit %zu bytes)",
                         c->transport->max_receive);
                if (!c->ended) {
                        (void) curl_loop_cancel(c->transport->loop, c->easy);
                        c->ended = true;
                }
                stream_finish(c, r == -EMSGSIZE ? CSI_CODE_RESOURCE_EXHAUSTED : CSI_CODE_INTERNAL, buf);
                return 0;
        }
        if (r > 0) {
                copy = malloc(MAX(size, (size_t) 1));
                if (copy && size > 0)
                        memcpy(copy, data, size);
                if (!copy) {
                        /* Try again on the next iteration rather than lose a message. */
                        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                        return 0;
                }
                memmove(c->body, c->body + used, c->body_size - used);
                c->body_size -= used;
                /* Another message (or a bad frame) already in: delivered next.
                 * The peek has its own outputs: `size` is this message's. */
                const uint8_t *next_data;
                size_t next_size, next_used;
                if (c->ended || grpc_next_frame(c->body, c->body_size, c->transport->max_receive, &next_data,
                                                &next_size, &next_used) != 0)
                        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                c->on_message(c, copy, size, c->userdata);
                free(copy);
                return 0;
        }
        if (!c->ended)
                return 0; /* the rest of the frame comes with the next bytes */
        if (c->end_code == CSI_CODE_OK && c->body_size > 0)
                stream_finish(c, CSI_CODE_INTERNAL, "grpc: stream ended inside a message");
        else
                stream_finish(c, c->end_code, c->end_message);
        return 0;
}

static int call_start(GrpcCall *c) {
        GrpcTransport *t = c->transport;
        uint64_t remaining = 0;
        char header[64];
        CURL *e;
        int r;

        e = c->easy = curl_easy_init();
        if (!e)
                return -ENOMEM;

        c->headers = curl_slist_append(c->headers, "content-type: application/grpc");
        if (c->headers)
                c->headers = curl_slist_append(c->headers, "te: trailers");
        if (c->headers)
                c->headers = curl_slist_append(c->headers, "Accept:");
        if (c->headers && c->deadline_usec > 0) {
                uint64_t now = now_usec();
                char v[16];
                remaining = c->deadline_usec > now ? c->deadline_usec - now : 1;
                grpc_format_timeout(remaining, v);
                snprintf(header, sizeof header, "grpc-timeout: %s", v);
                c->headers = curl_slist_append(c->headers, header);
        }
        if (!c->headers)
                return -ENOMEM;

        if (curl_easy_setopt(e, CURLOPT_URL, c->url) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, c->channel->socket_path) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_POST, 1L) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->request) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) c->request_size) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_USERAGENT, t->user_agent) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_WRITEDATA, c) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_HEADERDATA, c) != CURLE_OK ||
            curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf) != CURLE_OK)
                return -EIO;
        /* Never below H2_SAFE_RECEIVE_BUFFER with libcurl before 8.1.0
         * (curl_strands_h2_input()); a caller may ask for more (the CRI
         * client, whose lists of hundreds of containers then take fewer
         * rounds of the loop).  A stream gets no more than that minimum:
         * its messages are small, and its buffer stays for good. */
        size_t buffer = c->stream ? t->stream_buffer : t->receive_buffer;
        if (buffer > 0 && curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long) buffer) != CURLE_OK)
                return -EIO;
        if (remaining > 0 &&
            curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long) (remaining / USEC_PER_MSEC + CURL_BACKSTOP_MSEC)) != CURLE_OK)
                return -EIO;
        /* No CURLOPT_PIPEWAIT when reusing: with libcurl 8.14, a call that
         * waits for the driver's connection to multiplex stalls for good when
         * the first call on that connection is cancelled (test_cancel[curl8]).
         * Without it a burst may open a few connections before the first one
         * is known to multiplex; later calls share one. */
        if ((!t->reuse || c->stream) && (curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L) != CURLE_OK ||
                                          curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L) != CURLE_OK))
                return -EIO;

        c->trace_usec = test_trace_now();
        test_trace_at(c->trace_usec, "call-start", strrchr(c->url, '/') + 1);
        r = curl_loop_add(t->loop, e, c->stream ? on_stream_curl_done : on_curl_done, c);
        if (r < 0)
                return r;
        c->state = CALL_RUNNING;
        if (!c->stream)
                c->channel->in_flight++;
        return 0;
}

static void channel_dispatch(GrpcChannel *ch) {
        while (ch->in_flight < ch->max_parallel && ch->queue_head) {
                GrpcCall *c = ch->queue_head;
                int r;

                queue_remove(ch, c);
                c->state = CALL_RUNNING; /* so that a failure below is not dequeued twice */
                r = call_start(c);
                if (r < 0) {
                        char buf[128];
                        call_unlink_transport(c);
                        c->timer = sd_event_source_disable_unref(c->timer);
                        snprintf(buf, sizeof buf, "failed to start the call: %s", strerror(-r));
                        call_complete(c, CSI_CODE_INTERNAL, buf, NULL, 0);
                }
        }
}

static int on_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        GrpcCall *c = userdata;
        _cleanup_(grpc_channel_unrefp) GrpcChannel *ch = grpc_channel_ref(c->channel);
        bool was_queued = c->state == CALL_QUEUED;

        call_detach(c);
        if (!was_queued)
                channel_dispatch(ch);
        call_complete(c, CSI_CODE_DEADLINE_EXCEEDED,
                      was_queued ? "context deadline exceeded (waiting for a free call slot)"
                                 : "context deadline exceeded",
                      NULL, 0);
        return 0;
}

static int call_new(GrpcChannel *ch, const char *path, const uint8_t *msg, size_t size, grpc_call_done_t done,
                    void *userdata, GrpcCall **ret) {
        _cleanup_(call_freep) GrpcCall *c = NULL;

        if (!ch || !path || path[0] != '/' || !done || (size > 0 && !msg) || size > UINT32_MAX)
                return -EINVAL;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->transport = ch->transport;
        c->channel = grpc_channel_ref(ch);
        c->grpc_status = -1;
        c->done = done;
        c->userdata = userdata;
        c->start_usec = now_usec();
        if (asprintf(&c->url, "http://localhost%s", path) < 0) {
                c->url = NULL;
                return -ENOMEM;
        }
        c->request_size = GRPC_FRAME_HEADER + size;
        c->request = malloc(c->request_size);
        if (!c->request)
                return -ENOMEM;
        c->request[0] = 0;
        c->request[1] = (uint8_t) (size >> 24);
        c->request[2] = (uint8_t) (size >> 16);
        c->request[3] = (uint8_t) (size >> 8);
        c->request[4] = (uint8_t) size;
        if (size > 0)
                memcpy(c->request + GRPC_FRAME_HEADER, msg, size);
        *ret = TAKE_PTR(c);
        return 0;
}

static void call_link_transport(GrpcCall *c) {
        GrpcTransport *t = c->transport;

        c->t_next = t->calls;
        if (t->calls)
                t->calls->t_prev = c;
        t->calls = c;
}

int grpc_channel_call(GrpcChannel *ch, const char *path, const uint8_t *msg, size_t size, uint64_t timeout_usec,
                      grpc_call_done_t done, void *userdata, GrpcCall **ret) {
        _cleanup_(call_freep) GrpcCall *c = NULL;
        GrpcTransport *t;
        int r;

        r = call_new(ch, path, msg, size, done, userdata, &c);
        if (r < 0)
                return r;
        t = ch->transport;

        if (timeout_usec > 0) {
                c->deadline_usec = c->start_usec + timeout_usec;
                /* Accuracy 1 ms: sd-event's default would let a call overrun by up to 250 ms. */
                r = sd_event_add_time(t->event, &c->timer, CLOCK_MONOTONIC, c->deadline_usec, USEC_PER_MSEC,
                                      on_deadline, c);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_description(c->timer, "grpc-deadline");
        }

        if (ch->in_flight < ch->max_parallel) {
                r = call_start(c);
                if (r < 0)
                        return r;
        } else {
                c->state = CALL_QUEUED;
                queue_append(ch, c);
        }

        call_link_transport(c);
        if (ret)
                *ret = c;
        TAKE_PTR(c);
        return 0;
}

int grpc_channel_stream(GrpcChannel *ch, const char *path, const uint8_t *msg, size_t size,
                        grpc_stream_message_t on_message, grpc_call_done_t done, void *userdata, GrpcCall **ret) {
        _cleanup_(call_freep) GrpcCall *c = NULL;
        int r;

        if (!on_message)
                return -EINVAL;
        r = call_new(ch, path, msg, size, done, userdata, &c);
        if (r < 0)
                return r;
        c->stream = true;
        c->on_message = on_message;
        r = sd_event_add_defer(ch->transport->event, &c->deliver, on_stream_deliver, c);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(c->deliver, SD_EVENT_OFF);
        (void) sd_event_source_set_description(c->deliver, "grpc-stream");
        r = call_start(c);
        if (r < 0)
                return r;
        call_link_transport(c);
        if (ret)
                *ret = c;
        TAKE_PTR(c);
        return 0;
}

void grpc_call_cancel(GrpcCall *c) {
        if (!c)
                return;
        _cleanup_(grpc_channel_unrefp) GrpcChannel *ch = grpc_channel_ref(c->channel);
        bool was_running = c->state == CALL_RUNNING && !c->stream;

        call_detach(c);
        call_free(c);
        if (was_running)
                channel_dispatch(ch);
}
