/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "systemd/log.h"

/* Runs the logging calls with stderr redirected into a temporary file and
 * returns what was written, without the leading time stamp. */
static char *captured;

static void capture_begin(int *saved, FILE **tmp) {
        fflush(stderr);
        *tmp = tmpfile();
        assert_non_null(*tmp);
        *saved = dup(STDERR_FILENO);
        assert_true(dup2(fileno(*tmp), STDERR_FILENO) >= 0);
}

static void capture_end(int saved, FILE *tmp) {
        long n;
        fflush(stderr);
        assert_true(dup2(saved, STDERR_FILENO) >= 0);
        close(saved);
        n = ftell(tmp);
        if (n <= 0)
                n = lseek(fileno(tmp), 0, SEEK_END);
        free(captured);
        captured = calloc(1, (size_t) n + 1);
        assert_int_equal(pread(fileno(tmp), captured, (size_t) n, 0), n);
        fclose(tmp);
}

/* "01:02:03.456 info: x" → "info: x" */
static const char *without_stamp(const char *line) {
        const char *space = strchr(line, ' ');
        assert_non_null(space);
        assert_int_equal(space - line, 12);
        return space + 1;
}

static void test_stderr_line_with_fields(void **state) {
        int saved;
        FILE *tmp;

        log_set_target(LOG_TARGET_STDERR);
        log_set_max_level(LOG_INFO);
        capture_begin(&saved, &tmp);
        log_fields(LOG_INFO, &((LogFields){ .pod_uid = "4b1c-uid", .pod = "default/web", .volume = "data",
                                            .driver = "hostpath.csi.k8s.io", .csi_method = "NodePublishVolume",
                                            .csi_code = "OK", .message_id = LOG_MESSAGE_ID_VOLUME_PUBLISHED }),
                   "Volume %s published", "data");
        capture_end(saved, tmp);
        assert_string_equal(without_stamp(captured),
                            "info: Volume data published POD_UID=4b1c-uid POD=default/web VOLUME=data "
                            "DRIVER=hostpath.csi.k8s.io CSI_METHOD=NodePublishVolume CSI_CODE=OK "
                            "MESSAGE_ID=" LOG_MESSAGE_ID_VOLUME_PUBLISHED "\n");
}

static void test_values_are_quoted(void **state) {
        int saved;
        FILE *tmp;

        capture_begin(&saved, &tmp);
        log_fields(LOG_WARNING, &((LogFields){ .volume = "a b\"c\n" }), "x");
        capture_end(saved, tmp);
        assert_string_equal(without_stamp(captured), "warning: x VOLUME=\"a b\\\"c\\n\"\n");
}

static void test_level_filter_and_errno(void **state) {
        int saved, r;
        FILE *tmp;

        log_set_max_level(LOG_NOTICE);
        capture_begin(&saved, &tmp);
        log_info("hidden");
        r = log_debug_errno(ENOENT, "hidden too: %m");
        assert_int_equal(r, -ENOENT);
        r = log_error_errno(-EACCES, "Failed: %m");
        capture_end(saved, tmp);
        assert_int_equal(r, -EACCES);
        assert_string_equal(without_stamp(captured), "err: Failed: Permission denied\n");
        log_set_max_level(LOG_INFO);
}

static void test_level_names(void **state) {
        assert_int_equal(log_level_from_string("debug"), LOG_DEBUG);
        assert_int_equal(log_level_from_string("info"), LOG_INFO);
        assert_int_equal(log_level_from_string("notice"), LOG_NOTICE);
        assert_int_equal(log_level_from_string("warning"), LOG_WARNING);
        assert_int_equal(log_level_from_string("err"), LOG_ERR);
        assert_int_equal(log_level_from_string("error"), -EINVAL);
        assert_int_equal(log_level_from_string(NULL), -EINVAL);
        assert_string_equal(log_level_to_string(LOG_WARNING), "warning");
        assert_null(log_level_to_string(42));
}

static void test_target_selection(void **state) {
        struct stat st;
        char value[64];

        unsetenv("KVOLUMED_LOG_TARGET");
        unsetenv("JOURNAL_STREAM");
        log_setup();
        assert_int_equal(log_get_target(), LOG_TARGET_STDERR);

        assert_int_equal(fstat(STDERR_FILENO, &st), 0);
        snprintf(value, sizeof value, "%llu:%llu", (unsigned long long) st.st_dev, (unsigned long long) st.st_ino);
        setenv("JOURNAL_STREAM", value, 1);
        log_setup();
        assert_int_equal(log_get_target(), LOG_TARGET_JOURNAL);

        /* stderr redirected elsewhere by the user: no longer the journal. */
        snprintf(value, sizeof value, "%llu:%llu", (unsigned long long) st.st_dev,
                 (unsigned long long) st.st_ino + 1);
        setenv("JOURNAL_STREAM", value, 1);
        log_setup();
        assert_int_equal(log_get_target(), LOG_TARGET_STDERR);

        setenv("KVOLUMED_LOG_TARGET", "journal", 1);
        log_setup();
        assert_int_equal(log_get_target(), LOG_TARGET_JOURNAL);
        unsetenv("KVOLUMED_LOG_TARGET");
        unsetenv("JOURNAL_STREAM");
        log_set_target(LOG_TARGET_STDERR);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_stderr_line_with_fields), cmocka_unit_test(test_values_are_quoted),
                cmocka_unit_test(test_level_filter_and_errno),  cmocka_unit_test(test_level_names),
                cmocka_unit_test(test_target_selection),
        };
        int r = cmocka_run_group_tests(tests, NULL, NULL);
        free(captured);
        return r;
}
