/* SPDX-License-Identifier: Apache-2.0 */
/* Online expansion's pure parts: resource.Quantity parsing (a PV's and a
 * claim's sizes), the claim fields it reads, and the merge patch of a
 * claim's status that reports the node's part (kubelet's resize_util.go). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/objects.h"
#include "k8s/writers.h"

static int64_t q(const char *s) {
        int64_t v = -1;
        assert_int_equal(k8s_quantity_parse(s, &v), 0);
        return v;
}

static void test_quantity(void **state) {
        assert_int_equal(q("64Mi"), 64 * 1024 * 1024);
        assert_int_equal(q("1Gi"), 1024LL * 1024 * 1024);
        assert_int_equal(q("1.5Gi"), 1536LL * 1024 * 1024);
        assert_int_equal(q("2G"), 2000000000LL);
        assert_int_equal(q("100M"), 100000000LL);
        assert_int_equal(q("1k"), 1000);
        assert_int_equal(q("12345"), 12345);
        assert_int_equal(q("+7"), 7);
        assert_int_equal(q("1e3"), 1000);
        assert_int_equal(q("1E6"), 1000000);
        assert_int_equal(q("1Ei"), 1152921504606846976LL);
        assert_int_equal(q("1E"), 1000000000000000000LL);
        /* Rounded up to a whole byte, as Quantity.Value(). */
        assert_int_equal(q("500m"), 1);
        assert_int_equal(q("1500m"), 2);
        assert_int_equal(q("0.1"), 1);
        assert_int_equal(q("0"), 0);

        int64_t v;
        assert_int_equal(k8s_quantity_parse("", &v), -EINVAL);
        assert_int_equal(k8s_quantity_parse("Gi", &v), -EINVAL);
        assert_int_equal(k8s_quantity_parse("1GB", &v), -EINVAL);
        assert_int_equal(k8s_quantity_parse("1 Gi", &v), -EINVAL);
        assert_int_equal(k8s_quantity_parse("1.2.3", &v), -EINVAL);
        assert_int_equal(k8s_quantity_parse("-1Gi", &v), -ERANGE);
        assert_int_equal(k8s_quantity_parse("9Ei", &v), -ERANGE);
        assert_int_equal(k8s_quantity_parse("99999999999999999999999", &v), -ERANGE);
        assert_int_equal(k8s_quantity_parse(NULL, &v), -EINVAL);
}

static void test_claim_and_volume_sizes(void **state) {
        const char *pvc_json = "{\"metadata\":{\"name\":\"c\",\"namespace\":\"d\",\"uid\":\"u\"},"
                               "\"spec\":{\"volumeName\":\"pv\"},"
                               "\"status\":{\"phase\":\"Bound\",\"capacity\":{\"storage\":\"1Gi\"},"
                               "\"allocatedResourceStatuses\":{\"storage\":\"NodeResizePending\"}}}";
        const char *pv_json = "{\"metadata\":{\"name\":\"pv\",\"uid\":\"u\"},"
                              "\"spec\":{\"capacity\":{\"storage\":\"2Gi\"},"
                              "\"csi\":{\"driver\":\"d\",\"volumeHandle\":\"h\"}}}";
        K8sDecodeError err = {};
        K8sPersistentVolumeClaim *pvc = NULL;
        K8sPersistentVolume *pv = NULL;

        assert_int_equal(k8s_object_decode(&k8s_kind_pvc, pvc_json, strlen(pvc_json), (void **) &pvc, &err), 0);
        assert_string_equal(pvc->capacity, "1Gi");
        assert_string_equal(pvc->resize_status, "NodeResizePending");
        assert_int_equal(k8s_object_decode(&k8s_kind_pv, pv_json, strlen(pv_json), (void **) &pv, &err), 0);
        assert_string_equal(pv->capacity, "2Gi");
        k8s_pvc_free(pvc);
        k8s_pv_free(pv);

        /* Absent: NULL. */
        const char *bare = "{\"metadata\":{\"name\":\"c\",\"namespace\":\"d\",\"uid\":\"u\"},\"spec\":{}}";
        assert_int_equal(k8s_object_decode(&k8s_kind_pvc, bare, strlen(bare), (void **) &pvc, &err), 0);
        assert_null(pvc->capacity);
        assert_null(pvc->resize_status);
        k8s_pvc_free(pvc);
}

static char *patch_text(const char *pvc_json, const K8sPvcResizeUpdate *u) {
        cJSON *pvc = cJSON_Parse(pvc_json), *patch = NULL;
        char *text;

        assert_non_null(pvc);
        assert_int_equal(k8s_pvc_resize_patch(pvc, u, "2026-11-23T12:00:00Z", &patch), 0);
        text = cJSON_PrintUnformatted(patch);
        cJSON_Delete(pvc);
        cJSON_Delete(patch);
        return text;
}

static void test_resize_patch(void **state) {
        const char *pending = "{\"metadata\":{\"name\":\"c\",\"resourceVersion\":\"7\"},"
                              "\"status\":{\"capacity\":{\"storage\":\"1Gi\"},"
                              "\"allocatedResourceStatuses\":{\"storage\":\"NodeResizePending\"},"
                              "\"conditions\":[{\"type\":\"Other\",\"status\":\"True\"},"
                              "{\"type\":\"FileSystemResizePending\",\"status\":\"True\"}]}}";
        char *t;

        /* In progress: the status only, conditional on what was read. */
        t = patch_text(pending, &(K8sPvcResizeUpdate){ .resize_status = "NodeResizeInProgress" });
        assert_string_equal(t, "{\"metadata\":{\"resourceVersion\":\"7\"},\"status\":{\"allocatedResourceStatuses\":"
                               "{\"storage\":\"NodeResizeInProgress\"}}}");
        free(t);

        /* Done: the capacity, the entry removed (the map with it), resize conditions gone, others kept. */
        t = patch_text(pending, &(K8sPvcResizeUpdate){ .capacity = "2Gi", .clear_resize_conditions = true });
        assert_string_equal(t, "{\"metadata\":{\"resourceVersion\":\"7\"},\"status\":{\"allocatedResourceStatuses\":"
                               "null,\"capacity\":{\"storage\":\"2Gi\"},\"conditions\":[{\"type\":\"Other\","
                               "\"status\":\"True\"}]}}");
        free(t);

        /* Infeasible: the status and a NodeResizeError condition added. */
        t = patch_text(pending, &(K8sPvcResizeUpdate){ .resize_status = "NodeResizeInfeasible", .error = "boom" });
        assert_string_equal(t, "{\"metadata\":{\"resourceVersion\":\"7\"},\"status\":{\"allocatedResourceStatuses\":"
                               "{\"storage\":\"NodeResizeInfeasible\"},\"conditions\":[{\"type\":\"Other\","
                               "\"status\":\"True\"},{\"type\":\"FileSystemResizePending\",\"status\":\"True\"},"
                               "{\"type\":\"NodeResizeError\",\"status\":\"True\",\"lastTransitionTime\":"
                               "\"2026-11-23T12:00:00Z\",\"message\":\"failed to expand pvc with boom\"}]}}");
        free(t);

        /* Another resource's status stays: only the storage entry goes. */
        t = patch_text("{\"metadata\":{},\"status\":{\"allocatedResourceStatuses\":{\"storage\":\"x\",\"gpu\":\"y\"}}}",
                       &(K8sPvcResizeUpdate){ .capacity = "1", .clear_resize_conditions = true });
        assert_string_equal(t, "{\"metadata\":{},\"status\":{\"allocatedResourceStatuses\":{\"storage\":null},"
                               "\"capacity\":{\"storage\":\"1\"}}}");
        free(t);

        /* An existing NodeResizeError is kept as it is, not added twice. */
        t = patch_text("{\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"NodeResizeError\",\"status\":"
                       "\"True\",\"message\":\"old\"}]}}",
                       &(K8sPvcResizeUpdate){ .resize_status = "NodeResizeInProgress", .error = "new" });
        assert_string_equal(t, "{\"metadata\":{},\"status\":{\"allocatedResourceStatuses\":{\"storage\":"
                               "\"NodeResizeInProgress\"}}}");
        free(t);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_quantity),
                cmocka_unit_test(test_claim_and_volume_sizes),
                cmocka_unit_test(test_resize_patch),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
