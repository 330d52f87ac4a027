/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "volume/host/paths.h"

#define UID "7a3b2c1d-0000-4a4a-8b8b-0123456789ab"

/* Expected values computed independently (Python hashlib) from kubelet's rules. */
static void test_hash_names(void **state) {
        char name[CSI_HASH_NAME_MAX];
        char *s = NULL;

        assert_int_equal(csi_ephemeral_handle(UID, "scratch", name), 0);
        assert_string_equal(name, "csi-f6969e8dd080316277fc9a2527540312c7d93cfa25b01aaf07c20d0788b77310");
        assert_int_equal(strlen(name), 68);
        assert_int_equal(csi_attachment_name("vol-1", "hostpath.csi.k8s.io", "node-a", name), 0);
        assert_string_equal(name, "csi-5a70c5de395ccad5e79daeb27c7c4f2634b675e6e1bb2a397999a016143bc9fb");
        assert_int_equal(csi_unique_volume_name("hostpath.csi.k8s.io", "vol-1", &s), 0);
        assert_string_equal(s, "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1");
        free(s);

        assert_int_equal(csi_ephemeral_handle("not-a-uid", "scratch", name), -EINVAL);
        assert_int_equal(csi_attachment_name("", "d", "n", name), -EINVAL);
        assert_int_equal(csi_unique_volume_name("bad/driver", "h", &s), -EINVAL);
}

static void test_layout(void **state) {
        char *p = NULL;

        assert_int_equal(path_pod_volume_dir(UID, "pvc-1", &p), 0);
        assert_string_equal(p, "pods/" UID "/volumes/kubernetes.io~csi/pvc-1");
        free(p);
        assert_int_equal(path_publish_target(UID, "pvc-1", &p), 0);
        assert_string_equal(p, "pods/" UID "/volumes/kubernetes.io~csi/pvc-1/mount");
        free(p);
        assert_int_equal(path_staging_volume_dir("hostpath.csi.k8s.io", "vol-1", &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/hostpath.csi.k8s.io/"
                               "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49");
        free(p);
        assert_int_equal(path_staging_target("hostpath.csi.k8s.io", "vol-1", &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/hostpath.csi.k8s.io/"
                               "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount");
        free(p);
        assert_int_equal(path_block_map_dir("pv-b", &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/volumeDevices/pv-b/dev");
        free(p);
        assert_int_equal(path_block_data_dir("pv-b", &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/volumeDevices/pv-b/data");
        free(p);
        assert_int_equal(path_block_staging("pv-b", &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/volumeDevices/staging/pv-b");
        free(p);
        assert_int_equal(path_block_publish("pv-b", UID, &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/" UID);
        free(p);
        assert_int_equal(path_pod_device_dir(UID, &p), 0);
        assert_string_equal(p, "pods/" UID "/volumeDevices/kubernetes.io~csi");
        free(p);
}

static void test_hostile_names_are_refused(void **state) {
        char *p = NULL;
        const char *bad_specs[] = { "..", ".", "a/b", "", "../../etc" };

        for (size_t i = 0; i < ELEMENTSOF(bad_specs); i++) {
                assert_int_equal(path_pod_volume_dir(UID, bad_specs[i], &p), -EINVAL);
                assert_int_equal(path_publish_target(UID, bad_specs[i], &p), -EINVAL);
                assert_int_equal(path_block_staging(bad_specs[i], &p), -EINVAL);
        }
        assert_int_equal(path_pod_volume_dir("..", "v", &p), -EINVAL);
        assert_int_equal(path_staging_target("../x", "h", &p), -EINVAL);
        /* The handle is hashed, so any handle is safe in a path. */
        assert_int_equal(path_staging_target("d.example", "../../etc", &p), 0);
        assert_null(strstr(p, ".."));
        free(p);
        /* A PV named like kubelet's fixed block directories would collide with them. */
        assert_int_equal(path_block_map_dir("staging", &p), -EINVAL);
        assert_int_equal(path_block_data_dir("publish", &p), -EINVAL);
}

/* kvolumed's records mirror the volume dir's path in a tree of their own,
 * never inside the volume dir (kubelet's teardown would trip over them). */
static void test_intent_records(void **state) {
        char *p = NULL, *dir = NULL;

        assert_int_equal(path_intent_record("pods/" UID "/volumes/kubernetes.io~csi/pvc-1", NULL, &p), 0);
        assert_string_equal(p, "kvolumed/pods/" UID "/volumes/kubernetes.io~csi/pvc-1/kvolumed.json");
        assert_int_equal(path_parse_intent_record(p, &dir), 0);
        assert_string_equal(dir, "pods/" UID "/volumes/kubernetes.io~csi/pvc-1");
        free(p);
        free(dir);
        assert_int_equal(path_intent_record("plugins/kubernetes.io/csi/volumeDevices/pv-b/data", UID, &p), 0);
        assert_string_equal(p, "kvolumed/plugins/kubernetes.io/csi/volumeDevices/pv-b/data/kvolumed-" UID ".json");
        assert_int_equal(path_parse_intent_record(p, &dir), 0);
        assert_string_equal(dir, "plugins/kubernetes.io/csi/volumeDevices/pv-b/data");
        free(p);
        free(dir);
        assert_int_equal(path_legacy_intent_record("plugins/kubernetes.io/csi/volumeDevices/pv-b/data", UID, &p), 0);
        assert_string_equal(p, "plugins/kubernetes.io/csi/volumeDevices/pv-b/data/kvolumed-" UID ".json");
        free(p);
        assert_int_equal(path_intent_record("kvolumed/x", NULL, &p), -EINVAL);
        assert_int_equal(path_intent_record("/abs", NULL, &p), -EINVAL);
        assert_int_equal(path_intent_record("pods/x", "not-a-uid", &p), -EINVAL);
        assert_int_equal(path_parse_intent_record("kvolumed/kvolumed.json", &dir), -EINVAL);
        assert_int_equal(path_parse_intent_record("kvolumed/pods/x/other.json", &dir), -EINVAL);
        assert_int_equal(path_parse_intent_record("pods/x/kvolumed.json", &dir), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hash_names),
                cmocka_unit_test(test_layout),
                cmocka_unit_test(test_hostile_names_are_refused),
                cmocka_unit_test(test_intent_records),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
