/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include <sys/sysmacros.h>

#include "volume/host/paths.h"
#include "volume/kinds/csi/blockmap.h"
#include "volume/state/intent.h"

static void test_round_trip(void **state) {
        Intent in = { .operation = OP_PUBLISH, .done = true, .mount = true, .pod = (char *) "default/web" };
        Intent out = {};
        char *text = NULL;

        snprintf(in.boot_id, sizeof in.boot_id, "%s", "5a3c1f4e-0b7d-4c2a-9e61-8f0d2b4a6c11");
        assert_int_equal(intent_format(&in, &text), 0);
        assert_int_equal(intent_parse(text, &out), 0);
        assert_int_equal(out.operation, OP_PUBLISH);
        assert_true(out.done);
        assert_true(out.mount);
        assert_string_equal(out.boot_id, in.boot_id);
        assert_string_equal(out.pod, "default/web");
        intent_done(&out);
        free(text);
}

static void test_block_device_fields(void **state) {
        Intent in = { .operation = OP_PUBLISH, .done = true, .device = (char *) "7:3",
                      .device_serial = (char *) "QEMU_HARDDISK_1", .device_link = (char *) "/dev/disk/by-id/x" };
        Intent out = {};
        char *text = NULL, *formatted = NULL;
        dev_t devno;

        snprintf(in.boot_id, sizeof in.boot_id, "%s", "5a3c1f4e-0b7d-4c2a-9e61-8f0d2b4a6c11");
        assert_int_equal(intent_format(&in, &text), 0);
        assert_int_equal(intent_parse(text, &out), 0);
        assert_string_equal(out.device, "7:3");
        assert_string_equal(out.device_serial, "QEMU_HARDDISK_1");
        assert_string_equal(out.device_link, "/dev/disk/by-id/x");
        assert_int_equal(block_devno_parse(out.device, &devno), 0);
        assert_int_equal(major(devno), 7);
        assert_int_equal(minor(devno), 3);
        assert_int_equal(block_devno_format(devno, &formatted), 0);
        assert_string_equal(formatted, "7:3");
        assert_int_equal(block_devno_parse("7:3x", &devno), -EINVAL);
        assert_int_equal(block_devno_parse("sda", &devno), -EINVAL);
        intent_done(&out);
        free(text);
        free(formatted);
}

static void test_refuses_what_is_not_a_record(void **state) {
        static const char *const bad[] = {
                "",
                "[]",
                "{\"operation\":\"publish\",\"done\":true,\"mount\":true}",                        /* no boot */
                "{\"operation\":\"mount\",\"done\":true,\"mount\":true,\"bootID\":\"ab\"}",       /* unknown op */
                "{\"operation\":\"stage\",\"done\":\"yes\",\"mount\":true,\"bootID\":\"ab\"}",     /* not a bool */
                "{\"operation\":\"stage\",\"done\":true,\"mount\":true,\"bootID\":\"../x\"}",      /* not an ID */
                "{\"operation\":\"stage\",\"done\":true,\"mount\":true,\"bootID\":\"ab\",\"pod\":1}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                Intent out = {};
                assert_int_equal(intent_parse(bad[i], &out), -EBADMSG);
        }
}

/* Records carry their format's version; one without is version 1 (written
 * before the field); a newer one is refused as such, whatever its fields. */
static void test_versions(void **state) {
        Intent in = { .operation = OP_STAGE, .done = true, .boot_id = "abcd" }, out = {};
        _cleanup_free_ char *text = NULL;

        assert_int_equal(intent_format(&in, &text), 0);
        assert_non_null(strstr(text, "\"version\":1,"));
        assert_int_equal(intent_version(text), INTENT_VERSION);
        assert_int_equal(intent_version("{\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}"), 1);
        assert_int_equal(intent_parse("{\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}", &out), 0);
        intent_done(&out);
        assert_int_equal(intent_parse("{\"version\":1,\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}", &out), 0);
        intent_done(&out);
        assert_int_equal(intent_parse("{\"version\":2,\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}", &out),
                         -EPROTONOSUPPORT);
        assert_int_equal(intent_parse("{\"version\":7,\"steps\":[]}", &out), -EPROTONOSUPPORT);
        assert_int_equal(intent_version("{\"version\":7,\"steps\":[]}"), 7);
        assert_int_equal(intent_parse("{\"version\":0,\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}", &out), -EBADMSG);
        assert_int_equal(intent_parse("{\"version\":1.5,\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}", &out), -EBADMSG);
        assert_int_equal(intent_parse("{\"version\":\"2\",\"operation\":\"stage\",\"done\":true,\"mount\":false,\"bootID\":\"ab\"}", &out), -EBADMSG);
}

static void test_boot_id(void **state) {
        char a[BOOT_ID_MAX], b[BOOT_ID_MAX];
        assert_int_equal(boot_id_read(a), 0);
        assert_int_equal(boot_id_read(b), 0);
        assert_int_equal(strlen(a), 36);
        assert_string_equal(a, b);
}

static void test_parse_publish_target(void **state) {
        char *uid = NULL, *spec = NULL, *path = NULL;
        const char *u = "0b5e9c1e-1111-4222-8333-444455556666";

        assert_int_equal(path_publish_target(u, "pv-1", &path), 0);
        assert_int_equal(path_parse_publish_target(path, &uid, &spec), 0);
        assert_string_equal(uid, u);
        assert_string_equal(spec, "pv-1");
        free(uid);
        free(spec);
        free(path);
        assert_int_equal(path_parse_publish_target("pods/x/volumes/kubernetes.io~csi/pv/mount", &uid, &spec),
                         -EINVAL);
        assert_int_equal(path_parse_publish_target("plugins/kubernetes.io/csi/d/abc/globalmount", &uid, &spec),
                         -EINVAL);
        assert_int_equal(path_parse_publish_target(
                                 "pods/0b5e9c1e-1111-4222-8333-444455556666/volumes/kubernetes.io~csi/a/b/mount",
                                 &uid, &spec),
                         -EINVAL);
        assert_int_equal(path_parse_publish_target(
                                 "pods/0b5e9c1e-1111-4222-8333-444455556666/volumes/kubernetes.io~csi/pv/mountx",
                                 &uid, &spec),
                         -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_round_trip),
                cmocka_unit_test(test_block_device_fields),
                cmocka_unit_test(test_refuses_what_is_not_a_record),
                cmocka_unit_test(test_boot_id),
                cmocka_unit_test(test_versions),
                cmocka_unit_test(test_parse_publish_target),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
