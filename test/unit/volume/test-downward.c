/* SPDX-License-Identifier: Apache-2.0 */
/* The downward API renderers (volume/kinds/files/downward.h) against
 * kubelet's own test cases (pkg/fieldpath/fieldpath_test.go,
 * pkg/api/v1/resource/helpers_test.go, pkg/volume/downwardapi), and the
 * token refresh schedule (volume/kinds/projected/token.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/unit/volume/decode.h"
#include "volume/kinds/files/downward.h"
#include "volume/kinds/files/filekind.h"
#include "volume/state/desired.h"
#include "volume/kinds/projected/token.h"
#include "volume/kinds/projected/trustbundle.h"

static K8sPod *pod_json(const char *metadata, const char *containers, const char *status) {
        char *json = NULL;
        K8sPod *pod;
        assert_true(asprintf(&json,
                             "{\"metadata\":{\"name\":\"object-name\",\"namespace\":\"object-namespace\","
                             "\"uid\":\"b70b3269-858e-12a8-9cf2-1232a194038a\"%s%s},"
                             "\"spec\":{\"nodeName\":\"node-1\",\"serviceAccountName\":\"sa\",\"containers\":[%s],"
                             "\"initContainers\":[{\"name\":\"init-foo\",\"resources\":{\"limits\":{\"cpu\":\"9\"}}}]},"
                             "\"status\":{%s}}",
                             metadata ? "," : "", metadata ?: "", containers ?: "{\"name\":\"foo\"}", status ?: "") >= 0);
        pod = decode(&k8s_kind_pod, json);
        free(json);
        return pod;
}

static void field_is(const K8sPod *pod, const char *path, bool env, const char *want) {
        char *v = NULL, *err = NULL;
        int r = downward_field_value(pod, path, env, &v, &err);
        if (r < 0)
                fail_msg("%s: %s", path, err);
        assert_string_equal(v, want);
        free(v);
}

static void field_fails(const K8sPod *pod, const char *path, bool env, const char *fragment) {
        char *v = NULL, *err = NULL;
        assert_int_equal(downward_field_value(pod, path, env, &v, &err), -EINVAL);
        assert_null(v);
        assert_non_null(err);
        if (!strstr(err, fragment))
                fail_msg("%s: \"%s\" lacks \"%s\"", path, err, fragment);
        free(err);
}

/* fieldpath_test.go TestExtractFieldPathAsString. */
static void test_fieldpath_like_kubelet(void **state) {
        K8sPod *pod = pod_json("\"labels\":{\"key\":\"value\",\"something\":\"label value\"},"
                               "\"annotations\":{\"builder\":\"john-doe\","
                               "\"spec.pod.beta.kubernetes.io/statefulset-index\":\"1\",\"Www.k8s.io/test\":\"1\"}",
                               NULL, NULL);

        field_is(pod, "metadata.namespace", false, "object-namespace");
        field_is(pod, "metadata.name", false, "object-name");
        field_is(pod, "metadata.uid", false, "b70b3269-858e-12a8-9cf2-1232a194038a");
        field_is(pod, "metadata.labels", false, "key=\"value\"\nsomething=\"label value\"");
        field_is(pod, "metadata.annotations['spec.pod.beta.kubernetes.io/statefulset-index']", false, "1");
        field_is(pod, "metadata.annotations['Www.k8s.io/test']", false, "1");
        field_is(pod, "metadata.labels['something']", false, "label value");
        field_is(pod, "metadata.labels['absent']", false, "");
        field_fails(pod, "metadata.whoops", false, "unsupported fieldPath");
        field_fails(pod, "metadata.annotations['invalid~key']", false, "invalid key subscript in metadata.annotations");
        field_fails(pod, "metadata.labels['Www.k8s.io/test']", false, "invalid key subscript in metadata.labels");
        field_fails(pod, "metadata.notexisting['something']", false,
                    "fieldPath \"metadata.notexisting['something']\" does not support subscript");
        /* A volume may not name the env-only fields (API validation's
         * validVolumeDownwardAPIFieldPathExpressions; ExtractFieldPathAsString). */
        field_fails(pod, "spec.nodeName", false, "unsupported fieldPath");
        field_fails(pod, "status.podIP", false, "unsupported fieldPath");
        k8s_pod_free(pod);
}

/* fieldpath_test.go: "metadata.labels" with a newline in the value, the
 * annotations map; FormatMap's sort and %q escapes. */
static void test_format_map_like_kubelet(void **state) {
        K8sPod *pod = pod_json("\"labels\":{\"key\":\"value\\n\"},"
                               "\"annotations\":{\"z\":\"tab\\there\",\"a\":\"q\\\"b\\\\s\",\"B\":\"\\u00e9t\\u00e9\","
                               "\"c\":\"\\u0007\\u007f\\u0085\\u2028\"}",
                               NULL, NULL);
        char *q = NULL;

        field_is(pod, "metadata.labels", false, "key=\"value\\n\"");
        /* Bytewise order (upper case first), no newline after the last line;
         * printable UTF-8 kept, controls and separators escaped as Go's %q. */
        field_is(pod, "metadata.annotations", false,
                 "B=\"\xc3\xa9t\xc3\xa9\"\n"
                 "a=\"q\\\"b\\\\s\"\n"
                 "c=\"\\a\\x7f\\u0085\\u2028\"\n"
                 "z=\"tab\\there\"");
        assert_int_equal(downward_quote("\xff" "a\x01", &q), 0);
        assert_string_equal(q, "\"\\xffa\\x01\"");
        free(q);
        assert_int_equal(downward_quote("\xf0\x9f\x98\x80", &q), 0); /* an emoji is printable */
        assert_string_equal(q, "\"\xf0\x9f\x98\x80\"");
        free(q);
        k8s_pod_free(pod);

        pod = pod_json(NULL, NULL, NULL);
        field_is(pod, "metadata.labels", false, ""); /* no labels: an empty file */
        k8s_pod_free(pod);
}

/* kubelet_pods.go podFieldSelectorRuntimeValue: what a container's env adds. */
static void test_env_fields(void **state) {
        K8sPod *pod = pod_json(NULL, NULL,
                               "\"hostIP\":\"10.0.0.1\",\"hostIPs\":[{\"ip\":\"10.0.0.1\"},{\"ip\":\"fd00::1\"}],"
                               "\"podIP\":\"10.1.0.5\",\"podIPs\":[{\"ip\":\"10.1.0.5\"},{\"ip\":\"fd01::5\"}]");
        field_is(pod, "spec.nodeName", true, "node-1");
        field_is(pod, "spec.serviceAccountName", true, "sa");
        field_is(pod, "status.hostIP", true, "10.0.0.1");
        field_is(pod, "status.hostIPs", true, "10.0.0.1,fd00::1");
        field_is(pod, "status.podIP", true, "10.1.0.5");
        field_is(pod, "status.podIPs", true, "10.1.0.5,fd01::5");
        field_is(pod, "metadata.name", true, "object-name");
        k8s_pod_free(pod);
}

static void resource_is(const char *resources, const char *container, const char *resource, const char *divisor,
                        const K8sStringMap *allocatable, const char *want) {
        _cleanup_free_ char *c = NULL;
        K8sResourceFieldRef ref = { .container_name = (char *) container, .resource = (char *) resource,
                                    .divisor = (char *) (divisor ?: "1") };
        char *v = NULL, *err = NULL;
        K8sPod *pod;

        assert_true(asprintf(&c, "{\"name\":\"foo\",\"resources\":%s}", resources) >= 0);
        pod = pod_json(NULL, c, NULL);
        if (downward_resource_value(pod, &ref, NULL, allocatable, &v, &err) < 0)
                fail_msg("%s %s: %s", resources, resource, err);
        if (!streq(v, want))
                fail_msg("%s %s/%s: %s, want %s", resources, resource, strempty(divisor), v, want);
        free(v);
        k8s_pod_free(pod);
}

/* helpers_test.go TestExtractResourceValue, and MergeContainerResourceLimits. */
static void test_resources_like_kubelet(void **state) {
        char *keys[] = { "cpu", "memory", "ephemeral-storage" };
        char *values[] = { "4", "8Gi", "100Gi" };
        K8sStringMap alloc = { .keys = keys, .values = values, .n = 3 };
        K8sResourceFieldRef ref = { .container_name = (char *) "nope", .resource = (char *) "limits.cpu",
                                    .divisor = (char *) "1" };
        char *v = NULL, *err = NULL;
        K8sPod *pod;

        resource_is("{\"limits\":{\"cpu\":\"9\"}}", "foo", "limits.cpu", NULL, NULL, "9");
        resource_is("{}", "foo", "requests.cpu", NULL, NULL, "0");
        resource_is("{\"requests\":{\"cpu\":\"8\"}}", "foo", "requests.cpu", NULL, NULL, "8");
        resource_is("{\"requests\":{\"cpu\":\"100m\"}}", "foo", "requests.cpu", NULL, NULL, "1");
        resource_is("{\"requests\":{\"cpu\":\"1200m\"}}", "foo", "requests.cpu", "100m", NULL, "12");
        resource_is("{\"requests\":{\"memory\":\"100Mi\"}}", "foo", "requests.memory", NULL, NULL, "104857600");
        resource_is("{\"requests\":{\"memory\":\"100Mi\"},\"limits\":{\"memory\":\"1Gi\"}}", "foo", "requests.memory",
                    "1Mi", NULL, "100");
        resource_is("{\"requests\":{\"memory\":\"10Mi\"},\"limits\":{\"memory\":\"100Mi\"}}", "foo", "limits.memory",
                    NULL, NULL, "104857600");
        resource_is("{}", "init-foo", "limits.cpu", NULL, NULL, "9"); /* an init container's */
        resource_is("{\"limits\":{\"ephemeral-storage\":\"1G\"}}", "foo", "limits.ephemeral-storage", "1Mi", NULL,
                    "954"); /* rounded up */
        resource_is("{\"limits\":{\"hugepages-2Mi\":\"4Mi\"}}", "foo", "limits.hugepages-2Mi", "2Mi", &alloc, "2");
        resource_is("{\"limits\":{\"cpu\":\"1\"}}", "foo", "limits.cpu", "0", NULL, "1"); /* divisor 0 is 1 */
        /* No limit: the Node's allocatable (kubelet's MergeContainerResourceLimits);
         * a request is never defaulted so. */
        resource_is("{}", "foo", "limits.cpu", NULL, &alloc, "4");
        resource_is("{}", "foo", "limits.cpu", "1m", &alloc, "4000");
        resource_is("{\"limits\":{\"memory\":\"0\"}}", "foo", "limits.memory", "1Mi", &alloc, "8192");
        resource_is("{}", "foo", "limits.ephemeral-storage", "1Gi", &alloc, "100");
        resource_is("{}", "foo", "requests.memory", NULL, &alloc, "0");
        resource_is("{\"limits\":{\"cpu\":\"500m\"}}", "foo", "limits.cpu", "1m", &alloc, "500");

        pod = pod_json(NULL, NULL, NULL);
        assert_int_equal(downward_resource_value(pod, &ref, NULL, &alloc, &v, &err), -EINVAL);
        assert_string_equal(err, "container nope not found");
        free(err);
        ref.container_name = (char *) "foo";
        ref.resource = (char *) "limits.gpu";
        assert_int_equal(downward_resource_value(pod, &ref, NULL, &alloc, &v, &err), -EINVAL);
        assert_string_equal(err, "unsupported container resource : limits.gpu");
        free(err);
        k8s_pod_free(pod);
}

/* CollectData: modes, every item tried, errors aggregated. */
static void test_collect(void **state) {
        K8sPod *pod = pod_json("\"labels\":{\"a\":\"1\"}", "{\"name\":\"c\"}", NULL);
        K8sFieldRef name = { .field_path = (char *) "metadata.name" }, labels = { .field_path = (char *) "metadata.labels" },
                    bad = { .field_path = (char *) "spec.nodeName" };
        K8sResourceFieldRef cpu = { .container_name = (char *) "c", .resource = (char *) "limits.cpu",
                                    .divisor = (char *) "1m" };
        K8sDownwardAPIFile items[] = {
                { .path = (char *) "name", .field_ref = &name },
                { .path = (char *) "sub/labels", .field_ref = &labels, .has_mode = true, .mode = 0400 },
                { .path = (char *) "cpu", .resource_field_ref = &cpu },
        };
        K8sDownwardAPIProjection d = { .items = items, .n_items = 3 };
        char *keys[] = { "cpu" }, *values[] = { "2" };
        K8sStringMap alloc = { .keys = keys, .values = values, .n = 1 };
        AtomicPayload p = {};
        char *err = NULL;

        assert_true(downward_needs_node(&d));
        assert_int_equal(downward_collect(pod, &d, 0644, &alloc, &p, &err), 0);
        assert_null(err);
        assert_int_equal(p.n, 3);
        assert_string_equal(p.files[0].path, "name");
        assert_memory_equal(p.files[0].data, "object-name", 11);
        assert_int_equal(p.files[0].mode, 0644);
        assert_int_equal(p.files[1].mode, 0400);
        assert_memory_equal(p.files[1].data, "a=\"1\"", 5);
        assert_memory_equal(p.files[2].data, "2000", 4);
        atomic_payload_done(&p);

        items[2].field_ref = &bad;
        items[2].resource_field_ref = NULL;
        items[0].field_ref = &bad;
        assert_int_equal(downward_collect(pod, &d, 0644, NULL, &p, &err), -EINVAL);
        assert_string_equal(err, "[unsupported fieldPath: spec.nodeName, unsupported fieldPath: spec.nodeName]");
        free(err);
        atomic_payload_done(&p);
        k8s_pod_free(pod);
}

/* The refresh schedule: never later than kubelet's (80 % of the lifetime,
 * 24 h at most), spread over TOKEN_REFRESH_SPREAD of that age before it. */
static void test_token_refresh_at(void **state) {
        const uint64_t s = USEC_PER_SEC, t0 = 1700000000 * s;
        unsigned per_second[4000] = {};
        unsigned max = 0;

        assert_int_equal(token_refresh_at(t0, t0 + 3607 * s, 0), t0 + 3607 * s / 10 * 8);
        assert_int_equal(token_refresh_at(t0, t0 + 600 * s, 0), t0 + 480 * s);
        assert_int_equal(token_refresh_at(t0, t0 + 600 * s, 0.5), t0 + 480 * s - 96 * s);
        /* A year's token: 24 h, less its spread. */
        assert_int_equal(token_refresh_at(t0, t0 + 365 * 24 * 3600 * s, 0), t0 + TOKEN_MAX_TTL_USEC);
        assert_true(token_refresh_at(t0, t0 + 365 * 24 * 3600 * s, 0.999) >= t0 + TOKEN_MAX_TTL_USEC * 6 / 10);
        /* Out of range randomness is no randomness; an expired answer is due at once. */
        assert_int_equal(token_refresh_at(t0, t0 + 600 * s, 1.5), t0 + 480 * s);
        assert_int_equal(token_refresh_at(t0, t0, 0.3), t0);

        /* 1,000 kube-api-access tokens issued in the same second: spread
         * evenly, a handful a second at most (kubelet's 10 s of jitter would
         * put all 1,000 within 10 s). */
        for (unsigned i = 0; i < 1000; i++) {
                uint64_t at = token_refresh_at(t0, t0 + 3607 * s, (i + 0.5) / 1000.0);
                unsigned sec = (unsigned) ((at - t0) / s);
                assert_true(at <= t0 + 3607 * s / 10 * 8);
                assert_true(sec < 4000);
                max = MAX(max, ++per_second[sec]);
        }
        assert_true(max <= 2);
}

/* The bundles' certificates once each, sorted, re-encoded as Go's
 * pem.EncodeToMemory (64 columns); whatever the input's line length. */
static void test_trustbundle_merge(void **state) {
        const char *a = "-----BEGIN CERTIFICATE-----\nMAFh\n-----END CERTIFICATE-----\n";
        const char *b = "junk before\n-----BEGIN CERTIFICATE-----\nMA\nFi\n-----END CERTIFICATE-----\n";
        const char *bundles[] = { b, a, a };
        char *pem = NULL;
        size_t size = 0;

        assert_int_equal(trustbundle_merge(bundles, 3, &pem, &size), 0);
        assert_string_equal(pem, "-----BEGIN CERTIFICATE-----\nMAFh\n-----END CERTIFICATE-----\n"
                                 "-----BEGIN CERTIFICATE-----\nMAFi\n-----END CERTIFICATE-----\n");
        assert_int_equal(size, strlen(pem));
        free(pem);
        assert_int_equal(trustbundle_merge(bundles, 0, &pem, &size), 0);
        assert_int_equal(size, 0);
        free(pem);
        bundles[0] = "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n";
        assert_int_equal(trustbundle_merge(bundles, 1, &pem, &size), -EINVAL);
}

static const K8sConfigMap *the_configmap;

static int view_configmap(void *userdata, const char *namespace, const char *name, const K8sConfigMap **ret) {
        *ret = the_configmap && streq(name, the_configmap->meta.name) ? the_configmap : NULL;
        return 0;
}

/* kube-api-access exactly as the ServiceAccount admission plugin makes it:
 * a spec whose content is ca.crt, namespace and the token's stand-in. */
static void test_kube_api_access_desire(void **state) {
        K8sPod *pod = decode(&k8s_kind_pod,
                             "{\"metadata\":{\"name\":\"web\",\"namespace\":\"default\",\"uid\":\"0f4e1d2c-1111-2222-3333-444455556666\"},"
                             "\"spec\":{\"nodeName\":\"n\",\"containers\":[{\"name\":\"c\",\"volumeMounts\":[{\"name\":\"kube-api-access-x\","
                             "\"mountPath\":\"/var/run/secrets/kubernetes.io/serviceaccount\"}]}],"
                             "\"volumes\":[{\"name\":\"kube-api-access-x\",\"projected\":{\"defaultMode\":420,\"sources\":["
                             "{\"serviceAccountToken\":{\"expirationSeconds\":3607,\"path\":\"token\"}},"
                             "{\"configMap\":{\"name\":\"kube-root-ca.crt\",\"items\":[{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}]}},"
                             "{\"downwardAPI\":{\"items\":[{\"path\":\"namespace\",\"fieldRef\":{\"apiVersion\":\"v1\","
                             "\"fieldPath\":\"metadata.namespace\"}}]}}]}}]},\"status\":{\"phase\":\"Running\"}}");
        K8sConfigMap *cm = decode(&k8s_kind_configmap, "{\"metadata\":{\"name\":\"kube-root-ca.crt\",\"namespace\":"
                                                      "\"default\"},\"data\":{\"ca.crt\":\"PEM\"}}");
        ClusterView view = { .get_configmap = view_configmap };
        DesiredVolume dv = {};
        const FileSource *src;

        the_configmap = cm;
        assert_int_equal(volume_kind_projected.desire(pod, &pod->volumes[0], &view, false, &dv), 0);
        if (!dv.spec)
                fail_msg("waiting: %s failed: %s", strempty(dv.waiting), strempty(dv.failed));
        src = dv.spec->source;
        assert_int_equal(src->payload.n, 3);
        assert_string_equal(src->payload.files[0].path, "ca.crt");
        assert_memory_equal(src->payload.files[0].data, "PEM", 3);
        assert_string_equal(src->payload.files[1].path, "namespace");
        assert_string_equal(src->payload.files[2].path, "token");
        assert_int_equal(src->payload.files[2].size, 0);
        assert_int_equal(src->payload.files[2].mode, 0644);
        assert_string_equal(dv.spec->unique_name, "kubernetes.io/projected/0f4e1d2c-1111-2222-3333-444455556666-kube-api-access-x");
        volume_spec_free(dv.spec);
        k8s_configmap_free(cm);
        k8s_pod_free(pod);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fieldpath_like_kubelet),
                cmocka_unit_test(test_format_map_like_kubelet),
                cmocka_unit_test(test_env_fields),
                cmocka_unit_test(test_resources_like_kubelet),
                cmocka_unit_test(test_collect),
                cmocka_unit_test(test_token_refresh_at),
                cmocka_unit_test(test_kube_api_access_desire),
                cmocka_unit_test(test_trustbundle_merge),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
