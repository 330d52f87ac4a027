/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Unary and server-streaming gRPC calls over HTTP/2 cleartext on unix
 * sockets, with libcurl's multi interface on sd-event.  Internal to csi/: the typed client (client.c) and
 * plugin registration (registration.c) sit on it; other modules use csi/csi.h.
 *
 * The message bytes are opaque here: callers pack and unpack protobuf. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "csi/csi.h"
#include "systemd/macro.h"

#define GRPC_DEFAULT_MAX_RECEIVE (4u * 1024u * 1024u)
#define GRPC_FRAME_HEADER 5

typedef struct GrpcTransport GrpcTransport;
typedef struct GrpcChannel GrpcChannel;
typedef struct GrpcCall GrpcCall;

typedef struct GrpcTransportOptions {
        size_t max_receive_bytes; /* 0: 4 MiB */
        /* curl's receive buffer per unary call (CURLOPT_BUFFERSIZE, at most
         * 512 KiB); 0: curl's 16 KiB.  Larger for servers whose answers are
         * large (see grpc.c). */
        size_t receive_buffer_bytes;
        CsiConnectionReuse reuse;
        const char *user_agent; /* NULL: "kvolumed/<version>" */
} GrpcTransportOptions;

typedef struct GrpcResult {
        CsiCode code;
        const char *message; /* never NULL */
        const uint8_t *data; /* the response message, without its 5-byte prefix; only when OK */
        size_t size;
        uint64_t duration_usec;
} GrpcResult;

/* Called once per call that was not cancelled, never from grpc_channel_call(). */
typedef void (*grpc_call_done_t)(GrpcCall *call, const GrpcResult *result, void *userdata);

int grpc_transport_new(sd_event *event, const GrpcTransportOptions *o, GrpcTransport **ret);
/* Cancels the calls still running (no callbacks). */
GrpcTransport *grpc_transport_free(GrpcTransport *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(GrpcTransport *, grpc_transport_free);
bool grpc_transport_reuses_connections(GrpcTransport *t);

/* A channel is one server socket with its own in-flight limit and FIFO queue.
 * Reference counted: calls hold a reference, so a channel whose owner dropped
 * it stays alive until its last call ends. */
int grpc_channel_new(GrpcTransport *t, const char *socket_path, unsigned max_parallel, GrpcChannel **ret);
GrpcChannel *grpc_channel_ref(GrpcChannel *ch);
GrpcChannel *grpc_channel_unref(GrpcChannel *ch);
DEFINE_TRIVIAL_CLEANUP_FUNC(GrpcChannel *, grpc_channel_unref);
const char *grpc_channel_socket_path(GrpcChannel *ch);
unsigned grpc_channel_in_flight(GrpcChannel *ch);
/* A new in-flight limit (a configuration reload): a higher one starts
 * queued calls at once, a lower one lets the calls running finish. */
void grpc_channel_set_max_parallel(GrpcChannel *ch, unsigned max_parallel);
unsigned grpc_channel_queued(GrpcChannel *ch);

/* Starts a call of "path" ("/csi.v1.Node/NodeStageVolume") with the packed
 * request message "msg" (copied).  timeout_usec 0 means none.  Returns 0 and
 * the call in *ret (optional), or -errno without calling back. */
int grpc_channel_call(GrpcChannel *ch, const char *path, const uint8_t *msg, size_t size, uint64_t timeout_usec,
                      grpc_call_done_t done, void *userdata, GrpcCall **ret);
/* Withdraws a call that has not completed; its callback is not called.
 * Allowed from a stream's message callback. */
void grpc_call_cancel(GrpcCall *call);

/* A server-streaming call: each response message as soon as its frame is
 * complete, one per callback, from the loop (never from inside curl, so the
 * callback may start calls or cancel this one); "data" is valid during the
 * callback only. */
typedef void (*grpc_stream_message_t)(GrpcCall *call, const uint8_t *data, size_t size, void *userdata);

/* Starts a server-streaming call of "path" with the packed request "msg".
 * It has no deadline and runs until the server ends it, the connection
 * breaks, or it is cancelled; "done" then reports the end, after every
 * message received before it (code OK when the server closed the stream
 * normally; result->data is always NULL).  A stream always has a connection
 * of its own, whatever the transport's reuse: a never-ending transfer must
 * not be the one others wait to share a connection with (libcurl 8.x), nor
 * take unary calls down with it when it breaks.  It takes no slot of the
 * channel's in-flight limit. */
int grpc_channel_stream(GrpcChannel *ch, const char *path, const uint8_t *msg, size_t size,
                        grpc_stream_message_t on_message, grpc_call_done_t done, void *userdata, GrpcCall **ret);

/* ---- pure helpers, exposed for the unit tests ----------------------------- */

/* http-grpc-status-mapping.md: 400→INTERNAL, 401→UNAUTHENTICATED,
 * 403→PERMISSION_DENIED, 404→UNIMPLEMENTED, 429/502/503/504→UNAVAILABLE,
 * anything else→UNKNOWN. */
CsiCode grpc_code_from_http_status(long http_status);
/* "grpc-status" value: decimal without sign; anything else → UNKNOWN. */
CsiCode grpc_code_parse(const char *s, size_t n);
/* Percent-decodes a grpc-message value into a new NUL-terminated string;
 * malformed escapes are kept verbatim, as the spec asks.  NULL on ENOMEM. */
char *grpc_percent_decode(const char *s, size_t n);
/* "grpc-timeout" value as grpc-go writes it: the finest unit (n, u, m, S, M, H)
 * in which the timeout, rounded up, fits 8 digits. */
void grpc_format_timeout(uint64_t usec, char buf[static 16]);
/* Reads the 5-byte prefixed message in a response body: exactly one
 * uncompressed message.  0 with ret_data and ret_size set, or -EBADMSG. */
int grpc_unframe(const uint8_t *body, size_t size, const uint8_t **ret_data, size_t *ret_size);
/* The first of the messages in a stream's bytes: 1 with the message and the
 * bytes it took (prefix included), 0 while the frame is incomplete, -EBADMSG
 * for a compressed message, -EMSGSIZE for one declared larger than "max". */
int grpc_next_frame(const uint8_t *buf, size_t size, size_t max, const uint8_t **ret_data, size_t *ret_size,
                    size_t *ret_consumed);
