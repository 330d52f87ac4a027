/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "volume/state/voldata.h"

static void test_format_like_go(void **state) {
        VolData d = {
                .spec_vol_id = (char *) "pvc-1",
                .volume_handle = (char *) "vol-1",
                .driver_name = (char *) "hostpath.csi.k8s.io",
                .node_name = (char *) "node-a",
                .attachment_id = (char *) "csi-abc",
                .volume_lifecycle_mode = (char *) "Persistent",
        };
        char *text = NULL;

        assert_int_equal(vol_data_format(&d, &text), 0);
        /* What kubelet's json.NewEncoder(f).Encode(map[string]string{...}) writes. */
        assert_string_equal(text, "{\"attachmentID\":\"csi-abc\",\"driverName\":\"hostpath.csi.k8s.io\","
                                  "\"nodeName\":\"node-a\",\"specVolID\":\"pvc-1\",\"volumeHandle\":\"vol-1\","
                                  "\"volumeLifecycleMode\":\"Persistent\"}\n");
        free(text);
}

static void test_go_escaping(void **state) {
        VolData d = { .volume_handle = (char *) "a<b>&\"\\\n\x01\xe2\x80\xa8\xc3\xa9\xff" };
        char *text = NULL;

        assert_int_equal(vol_data_format(&d, &text), 0);
        assert_string_equal(text, "{\"volumeHandle\":\"a\\u003cb\\u003e\\u0026\\\"\\\\\\n\\u0001\\u2028\xc3\xa9"
                                  "\\ufffd\"}\n");
        free(text);
}

static void test_round_trip_and_kubelet_file(void **state) {
        VolData d = {};

        /* A file as a kubelet writes it for an inline volume, with a key we do not know. */
        assert_int_equal(vol_data_parse("{\"attachmentID\":\"csi-1\",\"driverName\":\"d\",\"futureKey\":\"x\","
                                        "\"nodeName\":\"n\",\"specVolID\":\"scratch\",\"volumeHandle\":\"csi-2\","
                                        "\"volumeLifecycleMode\":\"Ephemeral\"}\n",
                                        &d),
                         0);
        assert_string_equal(d.spec_vol_id, "scratch");
        assert_string_equal(d.volume_handle, "csi-2");
        assert_string_equal(d.volume_lifecycle_mode, "Ephemeral");
        assert_string_equal(d.attachment_id, "csi-1");
        assert_null(d.selinux_mount_context);

        char *text = NULL;
        VolData again = {};
        assert_int_equal(vol_data_format(&d, &text), 0);
        assert_int_equal(vol_data_parse(text, &again), 0);
        assert_string_equal(again.driver_name, "d");
        assert_string_equal(again.node_name, "n");
        free(text);
        vol_data_done(&again);
        vol_data_done(&d);
        assert_null(d.spec_vol_id);
}

static void test_bad_files(void **state) {
        VolData d = {};
        assert_int_equal(vol_data_parse("", &d), -EBADMSG);
        assert_int_equal(vol_data_parse("[]", &d), -EBADMSG);
        assert_int_equal(vol_data_parse("{\"specVolID\":1}", &d), -EBADMSG);
        assert_int_equal(vol_data_parse("{\"specVolID\":\"a\"", &d), -EBADMSG);
        assert_int_equal(vol_data_parse("{\"volumeHandle\":null}", &d), -EBADMSG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_format_like_go),
                cmocka_unit_test(test_go_escaping),
                cmocka_unit_test(test_round_trip_and_kubelet_file),
                cmocka_unit_test(test_bad_files),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
