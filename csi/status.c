/* SPDX-License-Identifier: Apache-2.0 */
/* gRPC status codes and the small wire-format rules around them. */
#include <inttypes.h>
#include <stdio.h>

#include "csi/grpc.h"

static const char *const code_names[_CSI_CODE_MAX] = {
        [CSI_CODE_OK] = "OK",
        [CSI_CODE_CANCELLED] = "Canceled",
        [CSI_CODE_UNKNOWN] = "Unknown",
        [CSI_CODE_INVALID_ARGUMENT] = "InvalidArgument",
        [CSI_CODE_DEADLINE_EXCEEDED] = "DeadlineExceeded",
        [CSI_CODE_NOT_FOUND] = "NotFound",
        [CSI_CODE_ALREADY_EXISTS] = "AlreadyExists",
        [CSI_CODE_PERMISSION_DENIED] = "PermissionDenied",
        [CSI_CODE_RESOURCE_EXHAUSTED] = "ResourceExhausted",
        [CSI_CODE_FAILED_PRECONDITION] = "FailedPrecondition",
        [CSI_CODE_ABORTED] = "Aborted",
        [CSI_CODE_OUT_OF_RANGE] = "OutOfRange",
        [CSI_CODE_UNIMPLEMENTED] = "Unimplemented",
        [CSI_CODE_INTERNAL] = "Internal",
        [CSI_CODE_UNAVAILABLE] = "Unavailable",
        [CSI_CODE_DATA_LOSS] = "DataLoss",
        [CSI_CODE_UNAUTHENTICATED] = "Unauthenticated",
};

const char *csi_code_name(CsiCode code) {
        if ((unsigned) code >= _CSI_CODE_MAX)
                return code_names[CSI_CODE_UNKNOWN];
        return code_names[code];
}

bool csi_code_is_final(CsiCode code) {
        switch (code) {
        case CSI_CODE_CANCELLED:
        case CSI_CODE_DEADLINE_EXCEEDED:
        case CSI_CODE_RESOURCE_EXHAUSTED:
        case CSI_CODE_ABORTED:
        case CSI_CODE_UNAVAILABLE:
                return false;
        default:
                return true;
        }
}

CsiCode grpc_code_from_http_status(long http_status) {
        switch (http_status) {
        case 400:
                return CSI_CODE_INTERNAL;
        case 401:
                return CSI_CODE_UNAUTHENTICATED;
        case 403:
                return CSI_CODE_PERMISSION_DENIED;
        case 404:
                return CSI_CODE_UNIMPLEMENTED;
        case 429:
        case 502:
        case 503:
        case 504:
                return CSI_CODE_UNAVAILABLE;
        default:
                return CSI_CODE_UNKNOWN;
        }
}

CsiCode grpc_code_parse(const char *s, size_t n) {
        unsigned v = 0;

        if (n == 0 || n > 3)
                return CSI_CODE_UNKNOWN;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return CSI_CODE_UNKNOWN;
                v = v * 10 + (unsigned) (s[i] - '0');
        }
        return v < _CSI_CODE_MAX ? (CsiCode) v : CSI_CODE_UNKNOWN;
}

static int unhex(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

char *grpc_percent_decode(const char *s, size_t n) {
        char *out = malloc(n + 1), *o = out;

        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                int hi, lo;
                if (s[i] == '%' && i + 2 < n && (hi = unhex(s[i + 1])) >= 0 && (lo = unhex(s[i + 2])) >= 0) {
                        *o++ = (char) (hi << 4 | lo);
                        i += 2;
                } else
                        *o++ = s[i];
        }
        *o = 0;
        return out;
}

void grpc_format_timeout(uint64_t usec, char buf[static 16]) {
        static const struct {
                char unit;
                uint64_t nsec;
        } units[] = {
                { 'n', 1 },
                { 'u', 1000 },
                { 'm', 1000 * 1000 },
                { 'S', UINT64_C(1000) * 1000 * 1000 },
                { 'M', UINT64_C(60) * 1000 * 1000 * 1000 },
                { 'H', UINT64_C(3600) * 1000 * 1000 * 1000 },
        };
        /* Beyond ~584 years the nanoseconds overflow: the hour count is still right. */
        uint64_t nsec = usec > UINT64_MAX / 1000 ? UINT64_MAX : usec * 1000;

        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                uint64_t v = nsec / units[i].nsec + (nsec % units[i].nsec != 0);
                if (v <= 99999999 || i == ELEMENTSOF(units) - 1) {
                        snprintf(buf, 16, "%" PRIu64 "%c", MIN(v, (uint64_t) 99999999), units[i].unit);
                        return;
                }
        }
}

int grpc_unframe(const uint8_t *body, size_t size, const uint8_t **ret_data, size_t *ret_size) {
        uint32_t len;

        if (size < GRPC_FRAME_HEADER || body[0] != 0)
                return -EBADMSG;
        len = (uint32_t) body[1] << 24 | (uint32_t) body[2] << 16 | (uint32_t) body[3] << 8 | body[4];
        if ((size_t) len != size - GRPC_FRAME_HEADER)
                return -EBADMSG;
        *ret_data = body + GRPC_FRAME_HEADER;
        *ret_size = len;
        return 0;
}

int grpc_next_frame(const uint8_t *buf, size_t size, size_t max, const uint8_t **ret_data, size_t *ret_size,
                    size_t *ret_consumed) {
        uint32_t len;

        if (size < GRPC_FRAME_HEADER)
                return 0;
        /* No grpc-encoding was offered: a compressed message is a protocol error. */
        if (buf[0] != 0)
                return -EBADMSG;
        len = (uint32_t) buf[1] << 24 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 8 | buf[4];
        if ((size_t) len > max)
                return -EMSGSIZE;
        if (size - GRPC_FRAME_HEADER < (size_t) len)
                return 0;
        *ret_data = buf + GRPC_FRAME_HEADER;
        *ret_size = len;
        *ret_consumed = GRPC_FRAME_HEADER + (size_t) len;
        return 1;
}
