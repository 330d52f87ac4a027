/* SPDX-License-Identifier: Apache-2.0 */
/* What a CSI driver or registrar sends back on a gRPC call (csi/grpc.c): the
 * response header lines (HTTP status, grpc-status, percent-encoded
 * grpc-message) and the body in chunks of any size, as libcurl hands them to
 * on_header() and on_body(), then on_curl_done(): the 5-byte frame prefix,
 * the receive limit and the result given to the caller.
 *
 * Those functions are static, so this file includes grpc.c itself (the
 * archive's grpc.o is then never linked in).
 *
 * Input: byte 0 picks libcurl's final code; then records of a tag byte (even:
 * a header line, odd: a body chunk), a length byte and that many bytes. */
#include "csi/grpc.c"
#include "test/fuzz/fuzz.h"

/* Small, so that the limit is reachable with small inputs. */
#define FUZZ_MAX_RECEIVE 4096u

static const CURLcode final_codes[] = { CURLE_OK, CURLE_OPERATION_TIMEDOUT, CURLE_HTTP2, CURLE_RECV_ERROR };

static size_t touched;

static void on_done(GrpcCall *g, const GrpcResult *r, void *userdata) {
        bool *called = userdata;

        FUZZ_ASSERT(!*called);
        *called = true;
        FUZZ_ASSERT(r->message);
        touched += strlen(r->message);
        FUZZ_ASSERT((int) r->code >= 0 && r->code < _CSI_CODE_MAX);
        if (r->code == CSI_CODE_OK) {
                /* The message, whole, within the limit. */
                FUZZ_ASSERT(r->data);
                FUZZ_ASSERT(r->size <= FUZZ_MAX_RECEIVE);
                for (size_t i = 0; i < r->size; i++)
                        touched += r->data[i];
        } else
                FUZZ_ASSERT(!r->data && r->size == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        GrpcTransport t = { .max_receive = FUZZ_MAX_RECEIVE };
        GrpcChannel *ch = NULL;
        GrpcCall *c;
        CURLcode cc;
        bool called = false;

        if (size < 1)
                return 0;
        cc = final_codes[data[0] % ELEMENTSOF(final_codes)];
        data++;
        size--;

        FUZZ_ASSERT(grpc_channel_new(&t, "/run/fuzz/csi.sock", 1, &ch) >= 0);
        c = calloc(1, sizeof *c);
        FUZZ_ASSERT(c);
        /* A running call, as call_start() leaves it. */
        *c = (GrpcCall){ .transport = &t, .channel = grpc_channel_ref(ch), .state = CALL_RUNNING,
                         .done = on_done, .userdata = &called, .grpc_status = -1 };
        t.calls = c;
        ch->in_flight = 1;

        while (size >= 2) {
                bool header = !(data[0] & 1);
                size_t n = MIN((size_t) data[1], size - 2);
                const uint8_t *chunk = data + 2;
                size_t done;

                data += 2 + n;
                size -= 2 + n;
                if (header) {
                        /* libcurl passes whole lines with their CRLF, never NUL-terminated:
                         * the copy is exactly as long, so ASan sees a read past the end. */
                        char *line = malloc(n + 2);
                        FUZZ_ASSERT(line);
                        if (n > 0)
                                memcpy(line, chunk, n);
                        memcpy(line + n, "\r\n", 2);
                        done = on_header(line, 1, n + 2, c);
                        free(line);
                        if (done != n + 2) {
                                cc = CURLE_WRITE_ERROR;
                                break;
                        }
                } else {
                        uint8_t *body;
                        if (n == 0) /* libcurl never calls with nothing */
                                continue;
                        body = malloc(n);
                        FUZZ_ASSERT(body);
                        memcpy(body, chunk, n);
                        done = on_body((char *) body, 1, n, c);
                        free(body);
                        if (done != n) {
                                cc = CURLE_WRITE_ERROR;
                                break;
                        }
                }
        }
        /* Frees the call. */
        on_curl_done(NULL, NULL, cc, c);
        FUZZ_ASSERT(called);
        FUZZ_ASSERT(!t.calls && ch->in_flight == 0);
        grpc_channel_unref(ch);
        return 0;
}
