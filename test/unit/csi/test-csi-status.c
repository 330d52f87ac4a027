/* SPDX-License-Identifier: Apache-2.0 */
/* The pure parts of csi/: status codes and their names, the gRPC wire rules
 * (HTTP status mapping, grpc-message decoding, grpc-timeout, framing), and
 * the plugin-registration version choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "csi/internal.h"

static void test_code_names(void **state) {
        assert_string_equal(csi_code_name(CSI_CODE_OK), "OK");
        assert_string_equal(csi_code_name(CSI_CODE_CANCELLED), "Canceled");
        assert_string_equal(csi_code_name(CSI_CODE_DEADLINE_EXCEEDED), "DeadlineExceeded");
        assert_string_equal(csi_code_name(CSI_CODE_RESOURCE_EXHAUSTED), "ResourceExhausted");
        assert_string_equal(csi_code_name(CSI_CODE_FAILED_PRECONDITION), "FailedPrecondition");
        assert_string_equal(csi_code_name(CSI_CODE_UNAVAILABLE), "Unavailable");
        assert_string_equal(csi_code_name(CSI_CODE_UNAUTHENTICATED), "Unauthenticated");
        assert_string_equal(csi_code_name((CsiCode) 99), "Unknown");
}

static void test_is_final(void **state) {
        static const CsiCode not_final[] = { CSI_CODE_CANCELLED, CSI_CODE_DEADLINE_EXCEEDED,
                                             CSI_CODE_RESOURCE_EXHAUSTED, CSI_CODE_ABORTED, CSI_CODE_UNAVAILABLE };
        unsigned n_final = 0;

        for (size_t i = 0; i < ELEMENTSOF(not_final); i++)
                assert_false(csi_code_is_final(not_final[i]));
        for (int c = 0; c < _CSI_CODE_MAX; c++)
                n_final += csi_code_is_final((CsiCode) c);
        assert_int_equal(n_final, _CSI_CODE_MAX - ELEMENTSOF(not_final));
        assert_true(csi_code_is_final(CSI_CODE_OK));
        assert_true(csi_code_is_final(CSI_CODE_NOT_FOUND));
        assert_true(csi_code_is_final(CSI_CODE_INTERNAL));
}

static void test_http_mapping(void **state) {
        assert_int_equal(grpc_code_from_http_status(400), CSI_CODE_INTERNAL);
        assert_int_equal(grpc_code_from_http_status(401), CSI_CODE_UNAUTHENTICATED);
        assert_int_equal(grpc_code_from_http_status(403), CSI_CODE_PERMISSION_DENIED);
        assert_int_equal(grpc_code_from_http_status(404), CSI_CODE_UNIMPLEMENTED);
        assert_int_equal(grpc_code_from_http_status(429), CSI_CODE_UNAVAILABLE);
        assert_int_equal(grpc_code_from_http_status(502), CSI_CODE_UNAVAILABLE);
        assert_int_equal(grpc_code_from_http_status(503), CSI_CODE_UNAVAILABLE);
        assert_int_equal(grpc_code_from_http_status(504), CSI_CODE_UNAVAILABLE);
        assert_int_equal(grpc_code_from_http_status(415), CSI_CODE_UNKNOWN);
        assert_int_equal(grpc_code_from_http_status(500), CSI_CODE_UNKNOWN);
        assert_int_equal(grpc_code_from_http_status(200), CSI_CODE_UNKNOWN);
}

static void test_code_parse(void **state) {
        assert_int_equal(grpc_code_parse("0", 1), CSI_CODE_OK);
        assert_int_equal(grpc_code_parse("14", 2), CSI_CODE_UNAVAILABLE);
        assert_int_equal(grpc_code_parse("16", 2), CSI_CODE_UNAUTHENTICATED);
        assert_int_equal(grpc_code_parse("17", 2), CSI_CODE_UNKNOWN);
        assert_int_equal(grpc_code_parse("", 0), CSI_CODE_UNKNOWN);
        assert_int_equal(grpc_code_parse("-1", 2), CSI_CODE_UNKNOWN);
        assert_int_equal(grpc_code_parse("1x", 2), CSI_CODE_UNKNOWN);
        assert_int_equal(grpc_code_parse("0005", 4), CSI_CODE_UNKNOWN);
}

static void check_decode(const char *in, const char *want) {
        _cleanup_free_ char *out = grpc_percent_decode(in, strlen(in));
        assert_non_null(out);
        assert_string_equal(out, want);
}

static void test_percent_decode(void **state) {
        check_decode("", "");
        check_decode("plain text", "plain text");
        check_decode("volume%20not%20found", "volume not found");
        check_decode("100%25", "100%");
        check_decode("%E2%82%AC", "\xe2\x82\xac");
        check_decode("bad %zz escape", "bad %zz escape");
        check_decode("trailing %", "trailing %");
        check_decode("trailing %4", "trailing %4");
        check_decode("%4a%4A", "JJ");
}

static void check_timeout(uint64_t usec, const char *want) {
        char buf[16];
        grpc_format_timeout(usec, buf);
        assert_string_equal(buf, want);
}

static void test_timeout(void **state) {
        check_timeout(0, "0n");
        check_timeout(1, "1000n");
        check_timeout(99999, "99999000n");
        check_timeout(100000, "100000u");
        check_timeout(500 * USEC_PER_MSEC, "500000u");
        check_timeout(2 * USEC_PER_MINUTE, "120000m");
        check_timeout(100000 * USEC_PER_SEC, "100000S");
        check_timeout(1000 * USEC_PER_HOUR, "3600000S");
        check_timeout(100000 * USEC_PER_HOUR, "6000000M");
        check_timeout(UINT64_MAX, "5124096H");
}

static void test_unframe(void **state) {
        static const uint8_t ok[] = { 0, 0, 0, 0, 2, 0x08, 0x01 };
        static const uint8_t empty[] = { 0, 0, 0, 0, 0 };
        static const uint8_t compressed[] = { 1, 0, 0, 0, 2, 0x08, 0x01 };
        static const uint8_t short_[] = { 0, 0, 0, 0, 3, 0x08, 0x01 };
        static const uint8_t two[] = { 0, 0, 0, 0, 1, 0x08, 0, 0, 0, 0, 0 };
        const uint8_t *data;
        size_t size;

        assert_int_equal(grpc_unframe(ok, sizeof ok, &data, &size), 0);
        assert_int_equal(size, 2);
        assert_ptr_equal(data, ok + 5);
        assert_int_equal(grpc_unframe(empty, sizeof empty, &data, &size), 0);
        assert_int_equal(size, 0);
        assert_int_equal(grpc_unframe(compressed, sizeof compressed, &data, &size), -EBADMSG);
        assert_int_equal(grpc_unframe(short_, sizeof short_, &data, &size), -EBADMSG);
        assert_int_equal(grpc_unframe(two, sizeof two, &data, &size), -EBADMSG);
        assert_int_equal(grpc_unframe(ok, 3, &data, &size), -EBADMSG);
        assert_int_equal(grpc_unframe(NULL, 0, &data, &size), -EBADMSG);
}

static void test_next_frame(void **state) {
        /* Two messages and the start of a third, as a stream's bytes arrive. */
        const uint8_t buf[] = { 0, 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 'x' };
        const uint8_t compressed[] = { 1, 0, 0, 0, 1, 'a' };
        const uint8_t big[] = { 0, 0, 0, 1, 0 };
        const uint8_t *data;
        size_t size, used;

        assert_int_equal(grpc_next_frame(buf, sizeof buf, 16, &data, &size, &used), 1);
        assert_ptr_equal(data, buf + 5);
        assert_int_equal(size, 2);
        assert_int_equal(used, 7);
        assert_int_equal(grpc_next_frame(buf + 7, sizeof buf - 7, 16, &data, &size, &used), 1);
        assert_int_equal(size, 0);
        assert_int_equal(used, 5);
        assert_int_equal(grpc_next_frame(buf + 12, sizeof buf - 12, 16, &data, &size, &used), 0);
        assert_int_equal(grpc_next_frame(buf, 4, 16, &data, &size, &used), 0);
        assert_int_equal(grpc_next_frame(buf, 0, 16, &data, &size, &used), 0);
        assert_int_equal(grpc_next_frame(compressed, sizeof compressed, 16, &data, &size, &used), -EBADMSG);
        /* Refused from its prefix alone, before 256 bytes are buffered for it. */
        assert_int_equal(grpc_next_frame(big, sizeof big, 255, &data, &size, &used), -EMSGSIZE);
        assert_int_equal(grpc_next_frame(big, sizeof big, 256, &data, &size, &used), 0);
}

static void check_version(const char *want, size_t n, ...) {
        char *v[8];
        const char *got = NULL;
        va_list ap;

        va_start(ap, n);
        for (size_t i = 0; i < n; i++)
                v[i] = va_arg(ap, char *);
        va_end(ap);
        if (!want) {
                assert_int_equal(csi_highest_supported_version(v, n, &got), -ENOENT);
                return;
        }
        assert_int_equal(csi_highest_supported_version(v, n, &got), 0);
        assert_string_equal(got, want);
}

static void test_versions(void **state) {
        check_version("1.0.0", 1, "1.0.0");
        check_version("v1.2.0", 3, "1.0.0", "v1.2.0", "1.1.9");
        check_version("1.10", 2, "1.9.9", "1.10");
        check_version("1", 1, "1");
        check_version("1.0.0", 2, "2.0.0", "1.0.0");
        check_version(NULL, 2, "2.0.0", "0.3.0");
        check_version(NULL, 3, "", "x1.0", "1.0.0-beta");
        check_version(NULL, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_code_names),   cmocka_unit_test(test_is_final),
                cmocka_unit_test(test_http_mapping), cmocka_unit_test(test_code_parse),
                cmocka_unit_test(test_percent_decode), cmocka_unit_test(test_timeout),
                cmocka_unit_test(test_unframe),
                cmocka_unit_test(test_next_frame),
                cmocka_unit_test(test_versions),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
