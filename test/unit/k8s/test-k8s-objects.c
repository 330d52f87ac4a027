/* SPDX-License-Identifier: Apache-2.0 */
/* Decoders on the API's own fully-populated fixtures, and on broken variants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/objects.h"
#include "systemd/validate.h"

static cJSON *load_fixture(const char *name) {
        const char *root = getenv("KVOLUMED_SOURCE_ROOT");
        char path[4096];
        FILE *f;
        long n;
        char *buf;
        cJSON *j;

        assert_non_null(root);
        snprintf(path, sizeof path, "%s/../shared/reference/k8s-api-fixtures/%s", root, name);
        f = fopen(path, "re");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc((size_t) n + 1);
        assert_non_null(buf);
        assert_int_equal(fread(buf, 1, (size_t) n, f), (size_t) n);
        fclose(f);
        j = cJSON_ParseWithLength(buf, (size_t) n);
        free(buf);
        assert_non_null(j);
        return j;
}

static cJSON *at(cJSON *j, const char *path) {
        /* "spec.volumes.0.csi": object keys and array indexes. */
        char buf[256], *save = NULL;
        snprintf(buf, sizeof buf, "%s", path);
        for (char *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save))
                j = cJSON_IsArray(j) ? cJSON_GetArrayItem(j, atoi(t)) : cJSON_GetObjectItemCaseSensitive(j, t);
        assert_non_null(j);
        return j;
}

static void replace(cJSON *j, const char *parent, const char *key, cJSON *value) {
        cJSON *p = at(j, parent);
        if (cJSON_GetObjectItemCaseSensitive(p, key))
                cJSON_ReplaceItemInObjectCaseSensitive(p, key, value);
        else
                cJSON_AddItemToObject(p, key, value);
}

static void test_pod_fixture(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.Pod.json");
        _cleanup_(k8s_pod_freep) K8sPod *p = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_pod_from_json(j, &p, &err), 0);
        assert_string_equal(p->meta.uid, "uidValue");
        assert_string_equal(p->meta.namespace, "namespaceValue");
        assert_string_equal(p->meta.name, "nameValue");
        assert_string_equal(p->meta.resource_version, "resourceVersionValue");
        assert_string_equal(p->meta.deletion_timestamp, "2009-01-01T01:01:01Z");
        assert_string_equal(p->node_name, "nodeNameValue");
        assert_string_equal(p->phase, "phaseValue");
        assert_string_equal(p->service_account_name, "serviceAccountNameValue");
        assert_true(p->has_fs_group);
        assert_int_equal(p->fs_group, 5);
        assert_string_equal(p->fs_group_change_policy, "fsGroupChangePolicyValue");
        assert_int_equal(p->n_volumes, 1);
        K8sPodVolume *v = &p->volumes[0];
        assert_string_equal(v->name, "nameValue");
        assert_non_null(v->csi);
        assert_string_equal(v->csi->driver, "driverValue");
        assert_true(v->csi->read_only);
        assert_string_equal(v->csi->fs_type, "fsTypeValue");
        assert_int_equal(v->csi->volume_attributes.n, 1);
        assert_string_equal(k8s_string_map_get(&v->csi->volume_attributes, "volumeAttributesKey"),
                            "volumeAttributesValue");
        assert_string_equal(v->csi->node_publish_secret_name, "nameValue");
        assert_string_equal(v->claim_name, "claimNameValue");
        assert_true(v->claim_read_only);
        assert_true(v->ephemeral);
        assert_int_equal(p->n_containers, 1);
        assert_int_equal(p->containers[0].n_mounts, 1);
        assert_string_equal(p->containers[0].mounts[0].name, "nameValue");
        assert_string_equal(p->containers[0].mounts[0].path, "mountPathValue");
        assert_true(p->containers[0].mounts[0].read_only);
        assert_int_equal(p->containers[0].n_devices, 1);
        assert_string_equal(p->containers[0].devices[0].path, "devicePathValue");
        assert_int_equal(p->n_init_containers, 1);
        assert_int_equal(p->init_containers[0].n_mounts, 1);
        assert_int_equal(p->n_container_statuses, 1);
        assert_true(p->container_statuses[0].running);
        assert_true(p->container_statuses[0].terminated);
        assert_int_equal(p->container_statuses[0].exit_code, 1);
        assert_int_equal(p->n_init_container_statuses, 1);

        const char *field;
        assert_int_equal(k8s_pod_validate_names(p, &field), -EINVAL);
        assert_string_equal(field, "metadata.uid");
}

static void test_pod_minimal_and_validation(void **state) {
        const char *text = "{\"metadata\":{\"name\":\"web-0\",\"namespace\":\"default\","
                           "\"uid\":\"0f1e2d3c-4b5a-6978-8a9b-acbdcedf0011\"},"
                           "\"spec\":{\"volumes\":[{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"c\"}}]}}";
        _cleanup_(k8s_pod_freep) K8sPod *p = NULL;
        K8sDecodeError err = {};
        const char *field = NULL;

        assert_int_equal(k8s_object_decode(&k8s_kind_pod, text, strlen(text), (void **) &p, &err), 0);
        assert_null(p->phase);
        assert_false(p->has_fs_group);
        assert_null(p->volumes[0].csi);
        assert_false(p->volumes[0].claim_read_only);
        assert_false(p->volumes[0].ephemeral);
        assert_int_equal(k8s_pod_validate_names(p, &field), 0);
        assert_null(field);
        free(p->volumes[0].name);
        p->volumes[0].name = strdup("../etc");
        assert_int_equal(k8s_pod_validate_names(p, &field), -EINVAL);
        assert_string_equal(field, "spec.volumes[].name");
}

typedef struct Broken {
        const char *parent;
        const char *key;
        const char *value; /* JSON; NULL: delete the key */
        const char *field;
        const char *problem;
} Broken;

static void check_broken_pod(const Broken *b) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.Pod.json");
        K8sPod *p = NULL;
        K8sDecodeError err = {};

        if (b->value)
                replace(j, b->parent, b->key, cJSON_Parse(b->value));
        else
                cJSON_DeleteItemFromObjectCaseSensitive(at(j, b->parent), b->key);
        assert_int_equal(k8s_pod_from_json(j, &p, &err), -EBADMSG);
        assert_null(p);
        assert_string_equal(err.field, b->field);
        assert_string_equal(err.problem, b->problem);
}

static void test_pod_broken(void **state) {
        static const Broken cases[] = {
                { "metadata", "name", NULL, "metadata.name", "missing" },
                { "metadata", "uid", "42", "metadata.uid", "not a string" },
                { "", "spec", NULL, "spec", "missing" },
                { "", "spec", "[]", "spec", "not an object" },
                { "spec", "volumes", "{}", "spec.volumes", "not an array" },
                { "spec.volumes.0", "name", NULL, "spec.volumes[0].name", "missing" },
                { "spec.volumes.0.csi", "driver", "true", "spec.volumes[0].csi.driver", "not a string" },
                { "spec.volumes.0.csi", "readOnly", "\"yes\"", "spec.volumes[0].csi.readOnly", "not a boolean" },
                { "spec.volumes.0.csi", "volumeAttributes", "{\"k\":1}", "spec.volumes[0].csi.volumeAttributes.k",
                  "not a string" },
                { "spec.volumes.0.persistentVolumeClaim", "claimName", "\"\"",
                  "spec.volumes[0].persistentVolumeClaim.claimName", "empty" },
                { "spec.securityContext", "fsGroup", "1e30", "spec.securityContext.fsGroup", "not an integer in range" },
                { "spec.securityContext", "fsGroup", "-1", "spec.securityContext.fsGroup", "out of range" },
                { "spec.securityContext", "fsGroup", "1.5", "spec.securityContext.fsGroup", "not an integer in range" },
                { "spec.containers.0.volumeMounts.0", "mountPath", "null",
                  "spec.containers[0].volumeMounts[0].mountPath", "missing" },
                { "status.containerStatuses.0.state.terminated", "exitCode", "\"1\"",
                  "status.containerStatuses[0].state.terminated.exitCode", "not a number" },
                { "status", "phase", "{}", "status.phase", "not a string" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                check_broken_pod(&cases[i]);
}

static void test_huge_values(void **state) {
        size_t n = 300 * 1024;
        char *big = malloc(n + 64);
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.Pod.json");
        K8sPod *p = NULL;
        K8sDecodeError err = {};

        assert_non_null(big);
        memset(big, 'x', n);
        big[n] = '\0';
        replace(j, "status", "phase", cJSON_CreateString(big));
        assert_int_equal(k8s_pod_from_json(j, &p, &err), -EBADMSG);
        assert_string_equal(err.field, "status.phase");
        assert_string_equal(err.problem, "string too long");
        free(big);

        /* Many volumes: accepted up to the limit. */
        cJSON *vols = cJSON_CreateArray();
        for (int i = 0; i < 2000; i++) {
                cJSON *v = cJSON_CreateObject();
                char name[32];
                snprintf(name, sizeof name, "v%d", i);
                cJSON_AddStringToObject(v, "name", name);
                cJSON_AddItemToArray(vols, v);
        }
        replace(j, "status", "phase", cJSON_CreateString("Running"));
        replace(j, "spec", "volumes", vols);
        assert_int_equal(k8s_pod_from_json(j, &p, &err), 0);
        assert_int_equal(p->n_volumes, 2000);
        k8s_pod_free(p);

        /* Not JSON at all, and not an object. */
        assert_int_equal(k8s_object_decode(&k8s_kind_pod, "{\"metadata\":", 12, (void **) &p, &err), -EBADMSG);
        assert_string_equal(err.field, "(json)");
        assert_int_equal(k8s_object_decode(&k8s_kind_pod, "[1]", 3, (void **) &p, &err), -EBADMSG);
}

static void test_pvc_fixture(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.PersistentVolumeClaim.json");
        _cleanup_(k8s_pvc_freep) K8sPersistentVolumeClaim *c = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_pvc_from_json(j, &c, &err), 0);
        assert_string_equal(c->meta.name, "nameValue");
        assert_string_equal(c->volume_name, "volumeNameValue");
        assert_string_equal(c->phase, "phaseValue");
        assert_string_equal(c->volume_mode, "volumeModeValue");
        assert_int_equal(k8s_strv_length(c->access_modes), 1);
        assert_string_equal(c->access_modes[0], "accessModesValue");

        cJSON_DeleteItemFromObjectCaseSensitive(at(j, "spec"), "volumeMode");
        cJSON_DeleteItemFromObjectCaseSensitive(at(j, "spec"), "volumeName");
        K8sPersistentVolumeClaim *c2 = NULL;
        assert_int_equal(k8s_pvc_from_json(j, &c2, &err), 0);
        assert_string_equal(c2->volume_mode, "Filesystem");
        assert_null(c2->volume_name);
        k8s_pvc_free(c2);

        replace(j, "spec", "accessModes", cJSON_Parse("[\"ReadWriteOnce\", 3]"));
        assert_int_equal(k8s_pvc_from_json(j, &c2, &err), -EBADMSG);
        assert_string_equal(err.field, "spec.accessModes[1]");
}

static void check_ref(const K8sSecretRef *r) {
        assert_string_equal(r->name, "nameValue");
        assert_string_equal(r->namespace, "namespaceValue");
}

static void test_pv_fixture(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.PersistentVolume.json");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *v = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_pv_from_json(j, &v, &err), 0);
        assert_non_null(v->csi);
        assert_string_equal(v->csi->driver, "driverValue");
        assert_string_equal(v->csi->volume_handle, "volumeHandleValue");
        assert_true(v->csi->read_only);
        assert_string_equal(v->csi->fs_type, "fsTypeValue");
        assert_string_equal(k8s_string_map_get(&v->csi->volume_attributes, "volumeAttributesKey"),
                            "volumeAttributesValue");
        check_ref(&v->csi->controller_publish_secret);
        check_ref(&v->csi->node_stage_secret);
        check_ref(&v->csi->node_publish_secret);
        check_ref(&v->csi->node_expand_secret);
        check_ref(&v->csi->controller_expand_secret);
        assert_string_equal(v->volume_mode, "volumeModeValue");
        assert_string_equal(v->mount_options[0], "mountOptionsValue");
        assert_string_equal(v->access_modes[0], "accessModesValue");
        assert_string_equal(v->claim_namespace, "namespaceValue");
        assert_string_equal(v->claim_name, "nameValue");
        assert_string_equal(v->claim_uid, "uidValue");
        assert_string_equal(v->phase, "phaseValue");

        cJSON_DeleteItemFromObjectCaseSensitive(at(j, "spec.csi"), "volumeHandle");
        K8sPersistentVolume *v2 = NULL;
        assert_int_equal(k8s_pv_from_json(j, &v2, &err), -EBADMSG);
        assert_string_equal(err.field, "spec.csi.volumeHandle");
        replace(j, "spec.csi", "volumeHandle", cJSON_CreateString("h"));
        replace(j, "spec.csi", "nodeStageSecretRef", cJSON_Parse("{\"namespace\":\"x\"}"));
        assert_int_equal(k8s_pv_from_json(j, &v2, &err), -EBADMSG);
        assert_string_equal(err.field, "spec.csi.nodeStageSecretRef.name");
}

static void test_csidriver_fixture_and_defaults(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("storage.k8s.io.v1.CSIDriver.json");
        _cleanup_(k8s_csidriver_freep) K8sCSIDriver *d = NULL;
        K8sCSIDriver *e = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_csidriver_from_json(j, &d, &err), 0);
        assert_true(d->attach_required);
        assert_true(d->pod_info_on_mount);
        assert_string_equal(d->volume_lifecycle_modes[0], "volumeLifecycleModesValue");
        assert_true(d->storage_capacity);
        assert_string_equal(d->fs_group_policy, "fsGroupPolicyValue");
        assert_int_equal(d->n_token_requests, 1);
        assert_string_equal(d->token_requests[0].audience, "audienceValue");
        assert_true(d->token_requests[0].has_expiration_seconds);
        assert_int_equal(d->token_requests[0].expiration_seconds, 2);
        assert_true(d->requires_republish);
        assert_true(d->se_linux_mount);
        assert_true(d->has_node_allocatable_update_period_seconds);
        assert_int_equal(d->node_allocatable_update_period_seconds, 9);
        assert_true(d->service_account_token_in_secrets);

        const char *text = "{\"metadata\":{\"name\":\"hostpath.csi.k8s.io\"},\"spec\":{}}";
        assert_int_equal(k8s_object_decode(&k8s_kind_csidriver, text, strlen(text), (void **) &e, &err), 0);
        assert_true(e->attach_required);
        assert_false(e->pod_info_on_mount);
        assert_int_equal(k8s_strv_length(e->volume_lifecycle_modes), 1);
        assert_string_equal(e->volume_lifecycle_modes[0], "Persistent");
        assert_false(e->storage_capacity);
        assert_string_equal(e->fs_group_policy, "ReadWriteOnceWithFSType");
        assert_int_equal(e->n_token_requests, 0);
        assert_false(e->requires_republish);
        assert_false(e->se_linux_mount);
        assert_false(e->has_node_allocatable_update_period_seconds);
        assert_false(e->service_account_token_in_secrets);
        k8s_csidriver_free(e);

        text = "{\"metadata\":{\"name\":\"d\"},\"spec\":{\"attachRequired\":\"false\"}}";
        assert_int_equal(k8s_object_decode(&k8s_kind_csidriver, text, strlen(text), (void **) &e, &err), -EBADMSG);
        assert_string_equal(err.field, "spec.attachRequired");
}

static void test_volume_attachment_fixture(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("storage.k8s.io.v1.VolumeAttachment.json");
        _cleanup_(k8s_volume_attachment_freep) K8sVolumeAttachment *va = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_volume_attachment_from_json(j, &va, &err), 0);
        assert_string_equal(va->attacher, "attacherValue");
        assert_string_equal(va->node_name, "nodeNameValue");
        assert_string_equal(va->persistent_volume_name, "persistentVolumeNameValue");
        assert_true(va->attached);
        assert_string_equal(k8s_string_map_get(&va->attachment_metadata, "attachmentMetadataKey"),
                            "attachmentMetadataValue");
        assert_string_equal(va->attach_error_message, "messageValue");
        assert_true(va->has_attach_error_code);
        assert_int_equal(va->attach_error_code, 3);
}

static void test_node_fixture(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.Node.json");
        _cleanup_(k8s_node_freep) K8sNode *n = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_node_from_json(j, &n, &err), 0);
        assert_string_equal(n->meta.uid, "uidValue");
        assert_int_equal(n->n_volumes_attached, 1);
        assert_string_equal(n->volumes_attached[0].name, "nameValue");
        assert_string_equal(n->volumes_attached[0].device_path, "devicePathValue");
        assert_string_equal(n->volumes_in_use[0], "volumesInUseValue");
        assert_string_equal(k8s_string_map_get(&n->annotations, "annotationsKey"), "annotationsValue");

        replace(j, "status", "volumesAttached", cJSON_Parse("[{\"devicePath\":\"/dev/x\"}]"));
        K8sNode *n2 = NULL;
        assert_int_equal(k8s_node_from_json(j, &n2, &err), -EBADMSG);
        assert_string_equal(err.field, "status.volumesAttached[0].name");
}

static void test_secret_fixture(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.Secret.json");
        _cleanup_(k8s_secret_freep) K8sSecret *s = NULL;
        K8sDecodeError err = {};
        const K8sSecretEntry *e;

        assert_int_equal(k8s_secret_from_json(j, &s, &err), 0);
        assert_string_equal(s->type, "typeValue");
        assert_int_equal(s->n_data, 1);
        e = k8s_secret_get(s, "dataKey");
        assert_non_null(e);
        assert_int_equal(e->size, 1);
        assert_int_equal(e->value[0], 0x02);

        const char *text = "{\"metadata\":{\"name\":\"s\"},\"data\":{\"a\":\"aGVsbG8=\",\"b\":\"\",\"c\":\"d29y\\nbGQ=\"}}";
        K8sSecret *s2 = NULL;
        assert_int_equal(k8s_object_decode(&k8s_kind_secret, text, strlen(text), (void **) &s2, &err), 0);
        assert_string_equal((char *) k8s_secret_get(s2, "a")->value, "hello");
        assert_int_equal(k8s_secret_get(s2, "b")->size, 0);
        assert_string_equal((char *) k8s_secret_get(s2, "c")->value, "world");
        k8s_secret_free(s2);

        text = "{\"metadata\":{\"name\":\"s\"},\"data\":{\"a\":\"!!notbase64\"}}";
        assert_int_equal(k8s_object_decode(&k8s_kind_secret, text, strlen(text), (void **) &s2, &err), -EBADMSG);
        assert_string_equal(err.field, "data.a");
        assert_string_equal(err.problem, "not base64");
}

static void test_validate_uid(void **state) {
        assert_int_equal(validate_uid("0f1e2d3c-4b5a-6978-8a9b-acbdcedf0011"), 0);
        assert_int_equal(validate_uid("0F1E2D3C-4B5A-6978-8A9B-ACBDCEDF0011"), -EINVAL);
        assert_int_equal(validate_uid("0f1e2d3c-4b5a-6978-8a9b-acbdcedf001"), -EINVAL);
        assert_int_equal(validate_uid("0f1e2d3c-4b5a-6978-8a9b-acbdcedf00111"), -EINVAL);
        assert_int_equal(validate_uid("0f1e2d3c04b5a-6978-8a9b-acbdcedf0011"), -EINVAL);
        assert_int_equal(validate_uid("../../../../../../../../../etc/pass"), -EINVAL);
        assert_int_equal(validate_uid(""), -EINVAL);
        assert_int_equal(validate_uid(NULL), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pod_fixture),
                cmocka_unit_test(test_pod_minimal_and_validation),
                cmocka_unit_test(test_pod_broken),
                cmocka_unit_test(test_huge_values),
                cmocka_unit_test(test_pvc_fixture),
                cmocka_unit_test(test_pv_fixture),
                cmocka_unit_test(test_csidriver_fixture_and_defaults),
                cmocka_unit_test(test_volume_attachment_fixture),
                cmocka_unit_test(test_node_fixture),
                cmocka_unit_test(test_secret_fixture),
                cmocka_unit_test(test_validate_uid),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
