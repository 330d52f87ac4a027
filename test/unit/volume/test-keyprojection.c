/* SPDX-License-Identifier: Apache-2.0 */
/* kubelet's MakePayload for configMap and secret volumes
 * (volume/kinds/files/keyprojection.h): every key or the items asked for,
 * modes, a missing key (an error unless optional), paths checked, the
 * order and the digest independent of how the object lists its keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "test/unit/volume/decode.h"
#include "volume/kinds/files/keyprojection.h"

static K8sConfigMap *cm(const char *json) {
        return decode(&k8s_kind_configmap, json);
}

/* The projection of a pod's configMap volume, as the pod decoder makes it. */
static K8sKeyProjection *proj_of(K8sPod **pod, const char *volume_json) {
        char buf[2048];
        snprintf(buf, sizeof buf,
                 "{\"metadata\":{\"uid\":\"u\",\"namespace\":\"ns\",\"name\":\"p\"},\"spec\":{\"volumes\":[%s],"
                 "\"containers\":[{\"name\":\"c\"}]}}",
                 volume_json);
        *pod = decode(&k8s_kind_pod, buf);
        assert_int_equal((*pod)->n_volumes, 1);
        return (*pod)->volumes[0].config_map ? (*pod)->volumes[0].config_map
                                                  : (*pod)->volumes[0].secret;
}

static const AtomicPayloadFile *find(const AtomicPayload *p, const char *path) {
        for (size_t i = 0; i < p->n; i++)
                if (strcmp(p->files[i].path, path) == 0)
                        return &p->files[i];
        return NULL;
}

static void test_every_key(void **state) {
        K8sConfigMap *c = cm("{\"metadata\":{\"name\":\"cfg\",\"namespace\":\"ns\"},"
                             "\"data\":{\"b.conf\":\"bee\",\"a.conf\":\"ay\"},\"binaryData\":{\"bin\":\"AAEC\"}}");
        K8sPod *pod;
        K8sKeyProjection *proj = proj_of(&pod, "{\"name\":\"v\",\"configMap\":{\"name\":\"cfg\",\"defaultMode\":384}}");
        KeySource src = key_source_configmap(c);
        AtomicPayload p = {};
        char *error = NULL;

        assert_int_equal(key_projection_append(proj, &src, (mode_t) proj->default_mode, &p, &error), 0);
        assert_null(error);
        assert_int_equal(key_payload_normalize(&p), 0);
        assert_int_equal(p.n, 3);
        assert_string_equal(p.files[0].path, "a.conf"); /* sorted */
        assert_string_equal(p.files[1].path, "b.conf");
        assert_string_equal(p.files[2].path, "bin");
        assert_int_equal(p.files[0].mode, 0600);
        assert_int_equal(p.files[2].size, 3);
        assert_memory_equal(p.files[2].data, "\x00\x01\x02", 3);
        assert_memory_equal(p.files[1].data, "bee", 3);
        key_payload_wipe(&p);
        k8s_pod_free(pod);
        k8s_configmap_free(c);
}

static void test_items_and_modes(void **state) {
        K8sConfigMap *c = cm("{\"metadata\":{\"name\":\"cfg\",\"namespace\":\"ns\"},"
                             "\"data\":{\"a\":\"1\",\"b\":\"2\"}}");
        K8sPod *pod;
        K8sKeyProjection *proj = proj_of(&pod, "{\"name\":\"v\",\"configMap\":{\"name\":\"cfg\",\"items\":["
                                               "{\"key\":\"a\",\"path\":\"dir/x\",\"mode\":256},"
                                               "{\"key\":\"b\",\"path\":\"y\"}]}}");
        KeySource src = key_source_configmap(c);
        AtomicPayload p = {};

        assert_int_equal(key_projection_append(proj, &src, (mode_t) proj->default_mode, &p, NULL), 0);
        assert_int_equal(key_payload_normalize(&p), 0);
        assert_int_equal(p.n, 2);
        assert_int_equal(find(&p, "dir/x")->mode, 0400);
        assert_int_equal(find(&p, "y")->mode, 0644); /* the API default */
        assert_null(find(&p, "a"));
        key_payload_wipe(&p);
        k8s_pod_free(pod);
        k8s_configmap_free(c);
}

static void test_missing_key(void **state) {
        K8sConfigMap *c = cm("{\"metadata\":{\"name\":\"cfg\",\"namespace\":\"ns\"},\"data\":{\"a\":\"1\"}}");
        K8sPod *pod;
        K8sKeyProjection *proj = proj_of(&pod, "{\"name\":\"v\",\"configMap\":{\"name\":\"cfg\",\"items\":["
                                               "{\"key\":\"a\",\"path\":\"a\"},{\"key\":\"nope\",\"path\":\"n\"}]}}");
        KeySource src = key_source_configmap(c);
        AtomicPayload p = {};
        char *error = NULL;

        assert_int_equal(key_projection_append(proj, &src, 0644, &p, &error), -ENOENT);
        assert_string_equal(error, "configmap references non-existent config key: nope");
        free(error);
        key_payload_wipe(&p);

        /* Optional: left out. */
        proj->optional = true;
        assert_int_equal(key_projection_append(proj, &src, 0644, &p, &error), 0);
        assert_int_equal(p.n, 1);
        key_payload_wipe(&p);

        /* The secret's words. */
        proj->optional = false;
        src = key_source_secret(NULL);
        assert_int_equal(key_projection_append(proj, &src, 0644, &p, &error), -ENOENT);
        assert_string_equal(error, "secret references non-existent secret key: a");
        free(error);
        key_payload_wipe(&p);
        k8s_pod_free(pod);
        k8s_configmap_free(c);
}

/* A path the writer would refuse is refused here, optional or not. */
static void test_bad_paths(void **state) {
        static const char *const bad[] = { "../x", "/abs", "..data", "a/../../b", "..hidden" };
        K8sConfigMap *c = cm("{\"metadata\":{\"name\":\"cfg\",\"namespace\":\"ns\"},\"data\":{\"a\":\"1\"}}");
        KeySource src = key_source_configmap(c);

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                K8sKeyToPath item = { .key = (char *) "a", .path = (char *) bad[i] };
                K8sKeyProjection proj = { .name = (char *) "cfg", .items = &item, .n_items = 1, .optional = true };
                AtomicPayload p = {};
                char *error = NULL;

                assert_int_equal(key_projection_append(&proj, &src, 0644, &p, &error), -EINVAL);
                assert_non_null(strstr(error, bad[i]));
                free(error);
                key_payload_wipe(&p);
        }
        k8s_configmap_free(c);
}

/* The same content digests alike whatever the order; a byte or a mode changed
 * does not; a path given twice keeps the last. */
static void test_digest(void **state) {
        AtomicPayload a = {}, b = {};
        uint8_t da[KEY_PAYLOAD_DIGEST_SIZE], db[KEY_PAYLOAD_DIGEST_SIZE];

        assert_int_equal(atomic_payload_add(&a, "x", "1", 1, 0644, ATOMIC_UID_NONE), 0);
        assert_int_equal(atomic_payload_add(&a, "y", "2", 1, 0644, ATOMIC_UID_NONE), 0);
        assert_int_equal(atomic_payload_add(&b, "y", "old", 3, 0644, ATOMIC_UID_NONE), 0);
        assert_int_equal(atomic_payload_add(&b, "y", "2", 1, 0644, ATOMIC_UID_NONE), 0);
        assert_int_equal(atomic_payload_add(&b, "x", "1", 1, 0644, ATOMIC_UID_NONE), 0);
        assert_int_equal(key_payload_normalize(&a), 0);
        assert_int_equal(key_payload_normalize(&b), 0);
        assert_int_equal(b.n, 2);
        assert_int_equal(key_payload_digest(&a, da), 0);
        assert_int_equal(key_payload_digest(&b, db), 0);
        assert_memory_equal(da, db, sizeof da);
        b.files[0].mode = 0600;
        assert_int_equal(key_payload_digest(&b, db), 0);
        assert_memory_not_equal(da, db, sizeof da);
        key_payload_wipe(&a);
        key_payload_wipe(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_key),
                cmocka_unit_test(test_items_and_modes),
                cmocka_unit_test(test_missing_key),
                cmocka_unit_test(test_bad_paths),
                cmocka_unit_test(test_digest),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
