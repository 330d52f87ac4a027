/* SPDX-License-Identifier: Apache-2.0 */
/* The Node-label writer's pure parts: which keys NodeRestriction lets a node
 * change on itself, label syntax, and the merge patch for adding and
 * removing topology labels with kubelet's collision rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/writers.h"

static void test_allowed_keys(void **state) {
        /* A driver's own topology keys. */
        assert_true(k8s_node_label_allowed("topology.hostpath.csi/node"));
        assert_true(k8s_node_label_allowed("topology.ebs.csi.aws.com/zone"));
        assert_true(k8s_node_label_allowed("zone"));
        /* kubelet's own labels, which NodeRestriction allows. */
        assert_true(k8s_node_label_allowed("topology.kubernetes.io/zone"));
        assert_true(k8s_node_label_allowed("kubernetes.io/hostname"));
        assert_true(k8s_node_label_allowed("node.kubernetes.io/instance-type"));
        assert_true(k8s_node_label_allowed("foo.node.kubernetes.io/bar"));
        assert_true(k8s_node_label_allowed("kubelet.kubernetes.io/x"));
        /* The rest of the kubernetes.io and k8s.io namespaces. */
        assert_false(k8s_node_label_allowed("node-role.kubernetes.io/master"));
        assert_false(k8s_node_label_allowed("kubernetes.io/role"));
        assert_false(k8s_node_label_allowed("topology.kubernetes.io/rack"));
        assert_false(k8s_node_label_allowed("k8s.io/x"));
        assert_false(k8s_node_label_allowed("example.k8s.io/x"));
        /* Only the namespace counts, not a look-alike. */
        assert_true(k8s_node_label_allowed("notkubernetes.io/x"));
        assert_true(k8s_node_label_allowed("kubernetes.io.example.com/x"));
        /* Malformed keys. */
        assert_false(k8s_node_label_allowed(""));
        assert_false(k8s_node_label_allowed("/x"));
        assert_false(k8s_node_label_allowed("Example.com/x"));
        assert_false(k8s_node_label_allowed("a/b/c"));
        assert_false(k8s_node_label_allowed("-x"));

        assert_true(k8s_node_label_is_kubelet_label("topology.kubernetes.io/region"));
        assert_false(k8s_node_label_is_kubelet_label("topology.hostpath.csi/node"));
}

static void test_validate_label(void **state) {
        char long_name[70];

        assert_int_equal(k8s_validate_label("a.b/c", "v"), 0);
        assert_int_equal(k8s_validate_label("c", ""), 0);
        assert_int_equal(k8s_validate_label("c", "A_b-9.z"), 0);
        assert_int_equal(k8s_validate_label("c", "bad value"), -EINVAL);
        assert_int_equal(k8s_validate_label("c", "-v"), -EINVAL);
        memset(long_name, 'a', 64);
        long_name[64] = 0;
        assert_int_equal(k8s_validate_label(long_name, "v"), -EINVAL);
        assert_int_equal(k8s_validate_label("c", long_name), -EINVAL);
        long_name[63] = 0;
        assert_int_equal(k8s_validate_label(long_name, long_name), 0);
}

static char *patch_of(const char *node_json, const K8sStringMap *add, const K8sStringMap *remove, int *ret,
                      char **ret_message) {
        _cleanup_(cJSON_Deletep) cJSON *node = cJSON_Parse(node_json);
        _cleanup_(cJSON_Deletep) cJSON *patch = NULL;

        assert_non_null(node);
        *ret = k8s_node_labels_patch(node, add, remove, &patch, ret_message);
        return patch ? cJSON_PrintUnformatted(patch) : NULL;
}

static void test_labels_patch(void **state) {
        const char *node = "{\"metadata\":{\"name\":\"n\",\"resourceVersion\":\"7\","
                           "\"labels\":{\"zone\":\"a\",\"other\":\"x\",\"topology.kubernetes.io/zone\":\"z1\"}}}";
        K8sStringMap add = { .keys = (char *[]){ "zone", "rack" }, .values = (char *[]){ "a", "r1" }, .n = 2 };
        K8sStringMap same = { .keys = (char *[]){ "zone" }, .values = (char *[]){ "a" }, .n = 1 };
        K8sStringMap clash = { .keys = (char *[]){ "zone" }, .values = (char *[]){ "b" }, .n = 1 };
        K8sStringMap rm = { .keys = (char *[]){ "other", "zone" }, .values = (char *[]){ "x", "not-a" }, .n = 2 };
        K8sStringMap forbidden = { .keys = (char *[]){ "node-role.kubernetes.io/x" }, .values = (char *[]){ "" },
                                   .n = 1 };
        K8sStringMap kubelet = { .keys = (char *[]){ "topology.kubernetes.io/zone" }, .values = (char *[]){ "z1" },
                                 .n = 1 };
        K8sStringMap invalid = { .keys = (char *[]){ "zone2" }, .values = (char *[]){ "a b" }, .n = 1 };
        char *message = NULL, *s;
        int r;

        /* Only what is missing goes into the patch. */
        s = patch_of(node, &add, NULL, &r, &message);
        assert_int_equal(r, 1);
        assert_string_equal(s, "{\"metadata\":{\"labels\":{\"rack\":\"r1\"}}}");
        free(s);

        /* Already there: nothing to send. */
        s = patch_of(node, &same, NULL, &r, &message);
        assert_int_equal(r, 0);
        assert_null(s);
        s = patch_of(node, &kubelet, NULL, &r, &message);
        assert_int_equal(r, 0);
        assert_null(s);

        /* kubelet's collision rule: an existing label with another value. */
        s = patch_of(node, &clash, NULL, &r, &message);
        assert_int_equal(r, -EEXIST);
        assert_null(s);
        assert_string_equal(message,
                            "detected topology value collision: driver reported zone:b but existing label is zone:a");
        message = mfree_str(message);

        /* Removal only of a label still holding the value given. */
        s = patch_of(node, NULL, &rm, &r, &message);
        assert_int_equal(r, 1);
        assert_string_equal(s, "{\"metadata\":{\"labels\":{\"other\":null}}}");
        free(s);

        /* Adding and removing the same key=value: adding wins. */
        s = patch_of(node, &same, &same, &r, &message);
        assert_int_equal(r, 0);
        assert_null(s);

        /* Keys NodeRestriction forbids, and invalid values, are refused. */
        s = patch_of(node, &forbidden, NULL, &r, &message);
        assert_int_equal(r, -EPERM);
        assert_null(s);
        assert_non_null(strstr(message, "NodeRestriction"));
        message = mfree_str(message);
        s = patch_of(node, NULL, &forbidden, &r, &message);
        assert_int_equal(r, -EPERM);
        message = mfree_str(message);
        s = patch_of(node, &invalid, NULL, &r, &message);
        assert_int_equal(r, -EINVAL);
        assert_null(s);
        message = mfree_str(message);

        /* A Node without labels at all. */
        s = patch_of("{\"metadata\":{\"name\":\"n\"}}", &add, NULL, &r, &message);
        assert_int_equal(r, 1);
        assert_string_equal(s, "{\"metadata\":{\"labels\":{\"zone\":\"a\",\"rack\":\"r1\"}}}");
        free(s);
}

/* Refused keys never reach the API: the call fails before any request. */
static void test_update_refuses_forbidden_keys(void **state) {
        K8sStringMap forbidden = { .keys = (char *[]){ "kubernetes.io/role" }, .values = (char *[]){ "x" }, .n = 1 };

        /* The client is never used: refused before a request is made. */
        assert_int_equal(k8s_node_update_labels(NULL, "n", &forbidden, NULL, NULL, NULL), -EPERM);
        assert_int_equal(k8s_node_update_labels(NULL, "n", NULL, &forbidden, NULL, NULL), -EPERM);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_allowed_keys),
                cmocka_unit_test(test_validate_label),
                cmocka_unit_test(test_labels_patch),
                cmocka_unit_test(test_update_refuses_forbidden_keys),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
