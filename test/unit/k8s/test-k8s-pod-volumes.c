/* SPDX-License-Identifier: Apache-2.0 */
/* The pod volume kinds of issue 32: decoders on the API's fully populated
 * fixtures and on pods shaped as the API server returns them (defaults
 * applied: defaultMode 420 = 0644, expirationSeconds 3607 from the
 * ServiceAccount admission plugin), the refusals of broken JSON, the
 * validation rules kept for the volume manager, ConfigMaps, and the
 * Node/PV fields the kinds need. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/objects.h"

static cJSON *load_fixture(const char *name) {
        const char *root = getenv("KVOLUMED_SOURCE_ROOT");
        char path[4096];
        FILE *f;
        long n;
        char *buf;
        cJSON *j;

        assert_non_null(root);
        snprintf(path, sizeof path, "%s/../shared/reference/k8s-api-fixtures/%s", root, name);
        if (!(f = fopen(path, "re"))) {
                const char *ref = getenv("KVOLUMED_REFERENCE_DIR");
                snprintf(path, sizeof path, "%s/k8s-api-fixtures/%s", ref ? ref : "/work/shared/reference", name);
                f = fopen(path, "re");
        }
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

/* A pod around "volumes" and "containers" JSON text. */
static K8sPod *pod_with(const char *volumes, const char *containers, int expect, K8sDecodeError *err) {
        char text[16384];
        K8sPod *p = NULL;
        K8sDecodeError e = {};

        snprintf(text, sizeof text,
                 "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"web-0\",\"namespace\":\"default\","
                 "\"uid\":\"6f1e0d8a-5a34-4c4e-9d2f-0b8c9f1a2b3c\"},\"spec\":{\"nodeName\":\"node-1\","
                 "\"serviceAccountName\":\"default\",\"volumes\":%s,\"containers\":%s}}",
                 volumes, containers ? containers : "[{\"name\":\"c\",\"image\":\"busybox\"}]");
        assert_int_equal(k8s_object_decode(&k8s_kind_pod, text, strlen(text), (void **) &p, &e), expect);
        if (err)
                *err = e;
        return p;
}

static void assert_refused(const char *volumes, const char *containers, const char *field) {
        K8sDecodeError err = {};
        K8sPod *p = pod_with(volumes, containers, -EBADMSG, &err);
        assert_null(p);
        print_message("# refused: %s: %s\n", err.field, err.problem);
        assert_string_equal(err.field, field);
        assert_non_null(err.problem);
}

static void test_fixture_every_source(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.Pod.json");
        _cleanup_(k8s_pod_freep) K8sPod *p = NULL;
        K8sDecodeError err = {};
        const char *problem;

        assert_int_equal(k8s_pod_from_json(j, &p, &err), 0);
        const K8sPodVolume *v = &p->volumes[0];
        /* configMap */
        assert_non_null(v->config_map);
        assert_string_equal(v->config_map->name, "nameValue");
        assert_int_equal(v->config_map->default_mode, 3);
        assert_true(v->config_map->optional);
        assert_int_equal(v->config_map->n_items, 1);
        assert_string_equal(v->config_map->items[0].key, "keyValue");
        assert_string_equal(v->config_map->items[0].path, "pathValue");
        assert_true(v->config_map->items[0].has_mode);
        assert_int_equal(v->config_map->items[0].mode, 3);
        /* secret: its name is secretName */
        assert_string_equal(v->secret->name, "secretNameValue");
        assert_int_equal(v->secret->default_mode, 3);
        /* downwardAPI */
        assert_int_equal(v->downward_api->default_mode, 2);
        assert_int_equal(v->downward_api->n_items, 1);
        assert_string_equal(v->downward_api->items[0].field_ref->field_path, "fieldPathValue");
        assert_string_equal(v->downward_api->items[0].field_ref->api_version, "apiVersionValue");
        assert_string_equal(v->downward_api->items[0].resource_field_ref->container_name, "containerNameValue");
        assert_string_equal(v->downward_api->items[0].resource_field_ref->resource, "resourceValue");
        assert_string_equal(v->downward_api->items[0].resource_field_ref->divisor, "0");
        assert_int_equal(v->downward_api->items[0].mode, 4);
        /* projected: one source with every member, podCertificate among them */
        assert_int_equal(v->projected->default_mode, 2);
        assert_int_equal(v->projected->n_sources, 1);
        const K8sVolumeProjection *s = &v->projected->sources[0];
        assert_string_equal(s->config_map->name, "nameValue");
        assert_int_equal(s->config_map->default_mode, 0);
        assert_string_equal(s->secret->name, "nameValue");
        assert_non_null(s->downward_api);
        assert_string_equal(s->service_account_token->audience, "audienceValue");
        assert_int_equal(s->service_account_token->expiration_seconds, 2);
        assert_string_equal(s->service_account_token->path, "pathValue");
        assert_string_equal(s->cluster_trust_bundle->name, "nameValue");
        assert_string_equal(s->cluster_trust_bundle->signer_name, "signerNameValue");
        assert_true(s->cluster_trust_bundle->has_label_selector);
        assert_true(s->cluster_trust_bundle->label_selector_invalid); /* "operatorValue" */
        assert_true(s->cluster_trust_bundle->optional);
        assert_string_equal(s->other, "podCertificate");
        /* emptyDir, hostPath */
        assert_string_equal(v->empty_dir->medium, "mediumValue");
        assert_string_equal(v->empty_dir->size_limit, "0");
        assert_int_equal(v->empty_dir->size_limit_bytes, 0);
        assert_string_equal(v->host_path->path, "pathValue");
        assert_string_equal(v->host_path->type, "typeValue");
        /* the first in-tree cloud source in the object, typed (CSI
         * migration), and the first other in-tree one */
        assert_non_null(v->in_tree);
        assert_int_equal(v->in_tree->kind, K8S_IN_TREE_GCE_PD);
        assert_string_equal(v->in_tree->volume_id, "pdNameValue");
        assert_string_equal(v->in_tree->fs_type, "fsTypeValue");
        assert_int_equal(v->in_tree->partition, 3);
        assert_true(v->in_tree->read_only);
        assert_string_equal(v->other_source, "gitRepo");
        assert_int_equal(k8s_pod_volume_validate(v, &problem), -EINVAL);
        assert_string_equal(problem, "more than one volume source");

        /* containers */
        const K8sContainer *c = &p->containers[0];
        const K8sVolumeMount *m = &c->mounts[0];
        assert_string_equal(m->sub_path, "subPathValue");
        assert_string_equal(m->sub_path_expr, "subPathExprValue");
        assert_string_equal(m->mount_propagation, "mountPropagationValue");
        assert_string_equal(m->recursive_read_only, "recursiveReadOnlyValue");
        assert_int_equal(k8s_volume_mount_validate(m, c, &problem), -EINVAL);
        assert_string_equal(problem, "subPath and subPathExpr are mutually exclusive");
        assert_null(c->devices[0].sub_path);
        assert_int_equal(c->n_env, 1);
        assert_string_equal(c->env[0].name, "nameValue");
        assert_string_equal(c->env[0].value, "valueValue");
        assert_string_equal(c->env[0].field_ref->field_path, "fieldPathValue");
        assert_string_equal(c->env[0].resource_field_ref->resource, "resourceValue");
        assert_string_equal(c->env[0].config_map_key_ref->key, "keyValue");
        assert_true(c->env[0].secret_key_ref->optional);
        assert_string_equal(k8s_string_map_get(&c->limits, "limitsKey"), "0");
        assert_string_equal(k8s_string_map_get(&c->requests, "requestsKey"), "0");
        assert_true(c->privileged);
        assert_true(c->has_run_as_user);
        /* pod */
        assert_true(p->has_run_as_user);
        assert_int_equal(p->run_as_user, 2);
        assert_int_equal(p->run_as_group, 6);
        assert_int_equal(p->n_supplemental_groups, 1);
        assert_int_equal(p->supplemental_groups[0], 4);
        assert_string_equal(k8s_string_map_get(&p->labels, "labelsKey"), "labelsValue");
        assert_string_equal(k8s_string_map_get(&p->annotations, "annotationsKey"), "annotationsValue");
        assert_string_equal(p->host_ip, "hostIPValue");
        assert_string_equal(p->pod_ips[0], "ipValue");
        assert_null(p->pod_ips[1]);
        assert_string_equal(p->host_ips[0], "ipValue");
        assert_int_equal(c->n_env_from, 1);
        assert_string_equal(c->env_from[0].prefix, "prefixValue");
        assert_string_equal(c->env_from[0].config_map_name, "nameValue");
        assert_string_equal(c->env_from[0].secret_name, "nameValue");
}

/* The volume the ServiceAccount admission plugin adds, as the API server
 * returns it (kubectl get pod -o json). */
static const char kube_api_access[] =
        "[{\"name\":\"kube-api-access-x7k2p\",\"projected\":{\"sources\":["
        "{\"serviceAccountToken\":{\"expirationSeconds\":3607,\"path\":\"token\"}},"
        "{\"configMap\":{\"name\":\"kube-root-ca.crt\",\"items\":[{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}]}},"
        "{\"downwardAPI\":{\"items\":[{\"path\":\"namespace\",\"fieldRef\":{\"apiVersion\":\"v1\","
        "\"fieldPath\":\"metadata.namespace\"}}]}}],\"defaultMode\":420}}]";

static void test_kube_api_access(void **state) {
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_with(kube_api_access, NULL, 0, NULL);
        const K8sPodVolume *v = &p->volumes[0];
        const char *problem = "unset";

        assert_string_equal(k8s_pod_volume_source(v), "projected");
        assert_null(v->other_source);
        assert_int_equal(v->projected->default_mode, 0644);
        assert_int_equal(v->projected->n_sources, 3);
        assert_null(v->projected->sources[0].service_account_token->audience);
        assert_int_equal(v->projected->sources[0].service_account_token->expiration_seconds, 3607);
        assert_string_equal(v->projected->sources[0].service_account_token->path, "token");
        assert_string_equal(v->projected->sources[1].config_map->name, "kube-root-ca.crt");
        assert_false(v->projected->sources[1].config_map->optional);
        assert_false(v->projected->sources[1].config_map->items[0].has_mode);
        assert_string_equal(v->projected->sources[2].downward_api->items[0].field_ref->field_path,
                            "metadata.namespace");
        assert_null(v->projected->sources[2].downward_api->items[0].resource_field_ref);
        assert_int_equal(k8s_pod_volume_validate(v, &problem), 0);
        assert_null(problem);
}

static void test_defaults(void **state) {
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_with(
                "[{\"name\":\"cm\",\"configMap\":{\"name\":\"app\"}},"
                "{\"name\":\"sec\",\"secret\":{\"secretName\":\"tls\"}},"
                "{\"name\":\"dapi\",\"downwardAPI\":{\"items\":[{\"path\":\"labels\",\"fieldRef\":{\"fieldPath\":"
                "\"metadata.labels\"}},{\"path\":\"mem\",\"resourceFieldRef\":{\"containerName\":\"c\","
                "\"resource\":\"limits.memory\"}}]}},"
                "{\"name\":\"proj\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"path\":\"t\","
                "\"audience\":\"vault\"}}]}},"
                "{\"name\":\"scratch\",\"emptyDir\":{}},"
                "{\"name\":\"mem\",\"emptyDir\":{\"medium\":\"Memory\",\"sizeLimit\":\"64Mi\"}},"
                "{\"name\":\"host\",\"hostPath\":{\"path\":\"/var/log\"}}]",
                "[{\"name\":\"c\",\"envFrom\":[{\"configMapRef\":{\"name\":\"app\"}},{\"prefix\":\"S_\","
                "\"secretRef\":{\"name\":\"tls\",\"optional\":true}}],\"env\":[{\"name\":\"POD\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":"
                "\"metadata.name\"}}},{\"name\":\"EMPTY\"}],\"resources\":{\"limits\":{\"memory\":\"128Mi\","
                "\"cpu\":\"500m\"}},\"volumeMounts\":[{\"name\":\"scratch\",\"mountPath\":\"/s\","
                "\"subPathExpr\":\"$(POD)\"},{\"name\":\"host\",\"mountPath\":\"/h\",\"subPath\":\"\"}]}]",
                0, NULL);
        const char *problem;

        assert_int_equal(p->n_volumes, 7);
        assert_int_equal(p->volumes[0].config_map->default_mode, 0644);
        assert_int_equal(p->volumes[0].config_map->n_items, 0);
        assert_false(p->volumes[0].config_map->optional);
        assert_string_equal(p->volumes[1].secret->name, "tls");
        assert_int_equal(p->volumes[1].secret->default_mode, 0644);
        assert_int_equal(p->volumes[2].downward_api->default_mode, 0644);
        assert_string_equal(p->volumes[2].downward_api->items[0].field_ref->api_version, "v1");
        assert_string_equal(p->volumes[2].downward_api->items[1].resource_field_ref->divisor, "1");
        assert_int_equal(p->volumes[3].projected->default_mode, 0644);
        assert_int_equal(p->volumes[3].projected->sources[0].service_account_token->expiration_seconds, 3600);
        assert_string_equal(p->volumes[3].projected->sources[0].service_account_token->audience, "vault");
        assert_string_equal(p->volumes[4].empty_dir->medium, "");
        assert_null(p->volumes[4].empty_dir->size_limit);
        assert_string_equal(p->volumes[5].empty_dir->medium, "Memory");
        assert_int_equal(p->volumes[5].empty_dir->size_limit_bytes, 64 * 1024 * 1024);
        assert_string_equal(p->volumes[6].host_path->type, "");
        for (size_t i = 0; i < p->n_volumes; i++) {
                assert_int_equal(k8s_pod_volume_validate(&p->volumes[i], &problem), 0);
                assert_null(p->volumes[i].other_source);
        }
        const K8sContainer *c = &p->containers[0];
        assert_string_equal(c->env[0].field_ref->field_path, "metadata.name");
        assert_null(c->env[0].value);
        assert_string_equal(c->env[1].value, "");
        assert_int_equal(c->n_env_from, 2);
        assert_string_equal(c->env_from[0].config_map_name, "app");
        assert_string_equal(c->env_from[0].prefix, "");
        assert_null(c->env_from[0].secret_name);
        assert_false(c->env_from[0].optional);
        assert_string_equal(c->env_from[1].secret_name, "tls");
        assert_string_equal(c->env_from[1].prefix, "S_");
        assert_true(c->env_from[1].optional);
        assert_string_equal(k8s_string_map_get(&c->limits, "cpu"), "500m");
        assert_string_equal(c->mounts[0].sub_path_expr, "$(POD)");
        assert_null(c->mounts[0].sub_path);
        assert_null(c->mounts[1].sub_path); /* "" is unset */
        assert_null(c->mounts[0].mount_propagation);
        assert_false(c->privileged);
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[0], c, &problem), 0);
}

static void test_refused(void **state) {
        assert_refused("[{\"name\":\"a\",\"configMap\":{\"name\":\"x\",\"defaultMode\":512}}]", NULL,
                       "spec.volumes[0].configMap.defaultMode");
        assert_refused("[{\"name\":\"a\",\"secret\":{\"secretName\":\"x\",\"defaultMode\":-1}}]", NULL,
                       "spec.volumes[0].secret.defaultMode");
        assert_refused("[{\"name\":\"a\",\"secret\":{\"secretName\":\"x\",\"defaultMode\":\"0644\"}}]", NULL,
                       "spec.volumes[0].secret.defaultMode");
        assert_refused("[{\"name\":\"a\",\"configMap\":{\"name\":\"x\",\"items\":[{\"path\":\"p\"}]}}]", NULL,
                       "spec.volumes[0].configMap.items[0].key");
        assert_refused("[{\"name\":\"a\",\"configMap\":{\"name\":\"x\",\"items\":[{\"key\":\"k\",\"path\":\"p\","
                       "\"mode\":4096}]}}]",
                       NULL, "spec.volumes[0].configMap.items[0].mode");
        assert_refused("[{\"name\":\"a\",\"emptyDir\":{\"sizeLimit\":\"1GB\"}}]", NULL,
                       "spec.volumes[0].emptyDir.sizeLimit");
        assert_refused("[{\"name\":\"a\",\"emptyDir\":{\"sizeLimit\":\"-1Gi\"}}]", NULL,
                       "spec.volumes[0].emptyDir.sizeLimit");
        assert_refused("[{\"name\":\"a\",\"emptyDir\":{\"sizeLimit\":64}}]", NULL, "spec.volumes[0].emptyDir.sizeLimit");
        assert_refused("[{\"name\":\"a\",\"hostPath\":{\"type\":\"Directory\"}}]", NULL, "spec.volumes[0].hostPath.path");
        assert_refused("[{\"name\":\"a\",\"projected\":{\"sources\":{}}}]", NULL, "spec.volumes[0].projected.sources");
        assert_refused("[{\"name\":\"a\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{}}]}}]", NULL,
                       "spec.volumes[0].projected.sources[0].serviceAccountToken.path");
        assert_refused("[{\"name\":\"a\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"path\":\"t\","
                       "\"expirationSeconds\":-5}}]}}]",
                       NULL, "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds");
        assert_refused("[{\"name\":\"a\",\"projected\":{\"sources\":[\"token\"]}}]", NULL,
                       "spec.volumes[0].projected.sources[0]");
        assert_refused("[{\"name\":\"a\",\"downwardAPI\":{\"items\":[{\"path\":\"m\",\"resourceFieldRef\":{"
                       "\"containerName\":\"c\",\"resource\":\"limits.memory\",\"divisor\":\"1 Mi\"}}]}}]",
                       NULL, "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.divisor");
        assert_refused("[{\"name\":\"a\",\"downwardAPI\":{\"items\":[{\"path\":\"m\",\"fieldRef\":{}}]}}]", NULL,
                       "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath");
        assert_refused("[]", "[{\"name\":\"c\",\"env\":{\"A\":\"b\"}}]", "spec.containers[0].env");
        assert_refused("[]", "[{\"name\":\"c\",\"envFrom\":[{\"configMapRef\":\"app\"}]}]",
                       "spec.containers[0].envFrom[0].configMapRef");
        assert_refused("[]", "[{\"name\":\"c\",\"env\":[{\"value\":\"b\"}]}]", "spec.containers[0].env[0].name");
        assert_refused("[]", "[{\"name\":\"c\",\"resources\":{\"limits\":{\"memory\":1}}}]",
                       "spec.containers[0].resources.limits.memory");
        assert_refused("[]", "[{\"name\":\"c\",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/v\","
                             "\"subPath\":7}]}]",
                       "spec.containers[0].volumeMounts[0].subPath");
        assert_refused("[]", "[{\"name\":\"c\",\"securityContext\":{\"privileged\":\"yes\"}}]",
                       "spec.containers[0].securityContext.privileged");
}

static void test_validate(void **state) {
        static const struct {
                const char *volume;
                int error;
                const char *problem;
        } cases[] = {
                { "{\"name\":\"a\",\"nfs\":{\"server\":\"s\",\"path\":\"/\"}}", -EOPNOTSUPP, NULL },
                { "{\"name\":\"a\",\"image\":{\"reference\":\"r\"}}", -EOPNOTSUPP, NULL },
                { "{\"name\":\"a\",\"gitRepo\":{\"repository\":\"r\"}}", -EOPNOTSUPP, NULL },
                { "{\"name\":\"a\",\"someFutureSource\":{}}", -EOPNOTSUPP, NULL },
                { "{\"name\":\"a\"}", -EINVAL, "no volume source" },
                { "{\"name\":\"a\",\"emptyDir\":{},\"hostPath\":{\"path\":\"/\"}}", -EINVAL, "more than one volume source" },
                { "{\"name\":\"a\",\"hostPath\":{\"path\":\"/\",\"type\":\"Dir\"}}", -EINVAL,
                  "hostPath type is not a known type" },
                { "{\"name\":\"a\",\"hostPath\":{\"path\":\"/\",\"type\":\"Socket\"}}", 0, NULL },
                { "{\"name\":\"a\",\"emptyDir\":{\"medium\":\"HugePages-2Mi\"}}", 0, NULL },
                { "{\"name\":\"a\",\"emptyDir\":{\"medium\":\"SSD\"}}", -EINVAL, NULL },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"podCertificate\":{\"signerName\":\"s\"}}]}}",
                  -EOPNOTSUPP, "a projected source of a kind kvolumed does not know" },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{}]}}", -EINVAL, "a projected source is empty" },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"configMap\":{\"name\":\"x\"},\"secret\":{\"name\":"
                  "\"y\"}}]}}",
                  -EINVAL, "a projected source has more than one member" },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"path\":\"t\","
                  "\"expirationSeconds\":599}}]}}",
                  -EINVAL, NULL },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"path\":\"t\","
                  "\"expirationSeconds\":600}}]}}",
                  0, NULL },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"clusterTrustBundle\":{\"path\":\"b\"}}]}}", -EINVAL,
                  "clusterTrustBundle needs exactly one of name and signerName" },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"clusterTrustBundle\":{\"path\":\"b\",\"name\":\"n\","
                  "\"labelSelector\":{}}}]}}",
                  -EINVAL, NULL },
                { "{\"name\":\"a\",\"projected\":{\"sources\":[{\"clusterTrustBundle\":{\"path\":\"b\","
                  "\"signerName\":\"example.com/s\",\"labelSelector\":{\"matchExpressions\":[{\"key\":\"k\","
                  "\"operator\":\"In\",\"values\":[]}]}}}]}}",
                  -EINVAL, "clusterTrustBundle labelSelector is not a valid selector" },
                { "{\"name\":\"a\",\"downwardAPI\":{\"items\":[{\"path\":\"m\"}]}}", -EINVAL, NULL },
                { "{\"name\":\"a\",\"downwardAPI\":{\"items\":[{\"path\":\"m\",\"resourceFieldRef\":{\"resource\":"
                  "\"limits.cpu\"}}]}}",
                  -EINVAL, "a downwardAPI resourceFieldRef in a volume needs containerName" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char vols[2048];
                const char *problem = NULL;
                snprintf(vols, sizeof vols, "[%s]", cases[i].volume);
                print_message("# %s\n", cases[i].volume);
                _cleanup_(k8s_pod_freep) K8sPod *p = pod_with(vols, NULL, 0, NULL);
                assert_int_equal(k8s_pod_volume_validate(&p->volumes[0], &problem), cases[i].error);
                if (cases[i].error == 0)
                        assert_null(problem);
                else
                        assert_non_null(problem);
                if (cases[i].problem)
                        assert_string_equal(problem, cases[i].problem);
                if (cases[i].error == -EOPNOTSUPP && !strstr(cases[i].volume, "projected")) {
                        /* The name the "unsupported volume type" message uses. */
                        assert_non_null(p->volumes[0].other_source);
                        assert_string_equal(k8s_pod_volume_source(&p->volumes[0]), p->volumes[0].other_source);
                        assert_non_null(strstr(cases[i].volume, p->volumes[0].other_source));
                }
        }
}

static void test_mount_validate(void **state) {
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_with(
                "[{\"name\":\"v\",\"emptyDir\":{}}]",
                "[{\"name\":\"plain\",\"volumeMounts\":["
                "{\"name\":\"v\",\"mountPath\":\"/a\",\"mountPropagation\":\"Bidirectional\"},"
                "{\"name\":\"v\",\"mountPath\":\"/b\",\"mountPropagation\":\"HostToContainer\"},"
                "{\"name\":\"v\",\"mountPath\":\"/c\",\"mountPropagation\":\"Shared\"},"
                "{\"name\":\"v\",\"mountPath\":\"/d\",\"recursiveReadOnly\":\"Enabled\"},"
                "{\"name\":\"v\",\"mountPath\":\"/e\",\"recursiveReadOnly\":\"Enabled\",\"readOnly\":true},"
                "{\"name\":\"v\",\"mountPath\":\"/f\",\"recursiveReadOnly\":\"IfPossible\",\"readOnly\":true,"
                "\"mountPropagation\":\"HostToContainer\"},"
                "{\"name\":\"v\",\"mountPath\":\"/g\",\"subPath\":\"x\",\"subPathExpr\":\"$(X)\"}]},"
                "{\"name\":\"priv\",\"securityContext\":{\"privileged\":true},\"volumeMounts\":["
                "{\"name\":\"v\",\"mountPath\":\"/a\",\"mountPropagation\":\"Bidirectional\"}]}]",
                0, NULL);
        const K8sContainer *c = &p->containers[0];
        const char *problem;

        assert_int_equal(k8s_volume_mount_validate(&c->mounts[0], c, &problem), -EPERM);
        assert_string_equal(problem, "Bidirectional mount propagation is available only to privileged containers");
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[0], NULL, &problem), -EPERM);
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[1], c, &problem), 0);
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[2], c, &problem), -EINVAL);
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[3], c, &problem), -EINVAL);
        assert_string_equal(problem, "recursiveReadOnly needs readOnly");
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[4], c, &problem), 0);
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[5], c, &problem), -EINVAL);
        assert_int_equal(k8s_volume_mount_validate(&c->mounts[6], c, &problem), -EINVAL);
        assert_true(p->containers[1].privileged);
        assert_int_equal(k8s_volume_mount_validate(&p->containers[1].mounts[0], &p->containers[1], &problem), 0);
}

static void test_label_selector(void **state) {
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_with(
                "[{\"name\":\"a\",\"projected\":{\"sources\":["
                "{\"clusterTrustBundle\":{\"signerName\":\"example.com/s\",\"path\":\"a\",\"labelSelector\":{"
                "\"matchLabels\":{\"tier\":\"root\"},\"matchExpressions\":[{\"key\":\"env\",\"operator\":\"In\","
                "\"values\":[\"prod\",\"stage\"]},{\"key\":\"old\",\"operator\":\"DoesNotExist\"},"
                "{\"key\":\"team\",\"operator\":\"Exists\"},{\"key\":\"x\",\"operator\":\"NotIn\",\"values\":[\"y\"]}]}}},"
                "{\"clusterTrustBundle\":{\"signerName\":\"example.com/s\",\"path\":\"b\",\"labelSelector\":{}}},"
                "{\"clusterTrustBundle\":{\"signerName\":\"example.com/s\",\"path\":\"c\"}},"
                "{\"clusterTrustBundle\":{\"name\":\"example.com:s:one\",\"path\":\"d\",\"optional\":true}}]}}]",
                NULL, 0, NULL);
        const K8sVolumeProjection *s = p->volumes[0].projected->sources;

        assert_string_equal(s[0].cluster_trust_bundle->label_selector,
                            "tier=root,env in (prod,stage),!old,team,x notin (y)");
        assert_false(s[0].cluster_trust_bundle->label_selector_invalid);
        assert_true(s[1].cluster_trust_bundle->has_label_selector);
        assert_string_equal(s[1].cluster_trust_bundle->label_selector, ""); /* everything */
        assert_false(s[2].cluster_trust_bundle->has_label_selector);       /* nothing */
        assert_string_equal(s[3].cluster_trust_bundle->name, "example.com:s:one");
        assert_true(s[3].cluster_trust_bundle->optional);
        assert_int_equal(k8s_pod_volume_validate(&p->volumes[0], NULL), 0);
}

static void test_configmap(void **state) {
        /* binaryData "AAEC/w==" is 00 01 02 ff: the size counts the NUL. */
        static const char text[] =
                "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"app\",\"namespace\":\"default\","
                "\"uid\":\"0d3c8e4b-1f2a-4b5c-8d9e-0f1a2b3c4d5e\",\"resourceVersion\":\"4242\"},"
                "\"data\":{\"app.conf\":\"listen 80\\n\",\"empty\":\"\"},\"binaryData\":{\"blob\":\"AAEC/w==\"},"
                "\"immutable\":true}";
        _cleanup_(k8s_configmap_freep) K8sConfigMap *c = NULL;
        K8sConfigMap *bad = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_object_decode(&k8s_kind_configmap, text, strlen(text), (void **) &c, &err), 0);
        assert_string_equal(c->meta.name, "app");
        assert_string_equal(c->meta.resource_version, "4242");
        assert_string_equal(k8s_string_map_get(&c->data, "app.conf"), "listen 80\n");
        assert_string_equal(k8s_string_map_get(&c->data, "empty"), "");
        const K8sSecretEntry *b = k8s_configmap_get_binary(c, "blob");
        assert_non_null(b);
        assert_int_equal(b->size, 4);
        assert_memory_equal(b->value, "\x00\x01\x02\xff", 4);
        assert_null(k8s_configmap_get_binary(c, "app.conf"));
        assert_true(c->immutable);
        assert_string_equal(k8s_kind_configmap.plural, "configmaps");
        assert_true(k8s_kind_configmap.namespaced);

        static const struct {
                const char *text, *field;
        } broken[] = {
                { "{\"metadata\":{\"name\":\"a\"},\"binaryData\":{\"blob\":\"not base64!\"}}", "binaryData.blob" },
                { "{\"metadata\":{\"name\":\"a\"},\"data\":{\"k\":1}}", "data.k" },
                { "{\"metadata\":{\"name\":\"a\"},\"data\":{\"k\":\"v\"},\"binaryData\":{\"k\":\"AA==\"}}", "binaryData" },
                { "{\"metadata\":{\"name\":\"a\"},\"immutable\":\"yes\"}", "immutable" },
                { "{\"data\":{}}", "metadata" },
        };
        for (size_t i = 0; i < ELEMENTSOF(broken); i++) {
                err = (K8sDecodeError) {};
                assert_int_equal(k8s_object_decode(&k8s_kind_configmap, broken[i].text, strlen(broken[i].text),
                                                   (void **) &bad, &err),
                                 -EBADMSG);
                assert_null(bad);
                assert_string_equal(err.field, broken[i].field);
        }
}

static void test_secret_and_node(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *sj = load_fixture("core.v1.Secret.json");
        _cleanup_(cJSON_Deletep) cJSON *nj = load_fixture("core.v1.Node.json");
        _cleanup_(k8s_secret_freep) K8sSecret *s = NULL;
        _cleanup_(k8s_node_freep) K8sNode *n = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_secret_from_json(sj, &s, &err), 0);
        assert_true(s->immutable);
        assert_string_equal(s->type, "typeValue");
        assert_int_equal(k8s_node_from_json(nj, &n, &err), 0);
        assert_string_equal(k8s_string_map_get(&n->allocatable, "allocatableKey"), "0");
        assert_string_equal(k8s_string_map_get(&n->capacity, "capacityKey"), "0");

        static const char node[] =
                "{\"metadata\":{\"name\":\"node-1\",\"uid\":\"5c1e4f2a-8b7d-4e6f-9a0b-1c2d3e4f5a6b\"},"
                "\"status\":{\"capacity\":{\"cpu\":\"4\",\"memory\":\"16374624Ki\",\"ephemeral-storage\":"
                "\"101430960Ki\",\"hugepages-2Mi\":\"0\",\"pods\":\"110\"},\"allocatable\":{\"cpu\":\"3920m\","
                "\"memory\":\"15223648Ki\",\"ephemeral-storage\":\"93478772582\",\"pods\":\"110\"}}}";
        _cleanup_(k8s_node_freep) K8sNode *n2 = NULL;
        int64_t v;
        assert_int_equal(k8s_object_decode(&k8s_kind_node, node, strlen(node), (void **) &n2, &err), 0);
        assert_int_equal(k8s_quantity_parse(k8s_string_map_get(&n2->allocatable, "memory"), &v), 0);
        assert_int_equal(v, 15223648LL * 1024);
        assert_int_equal(k8s_quantity_parse_milli(k8s_string_map_get(&n2->allocatable, "cpu"), &v), 0);
        assert_int_equal(v, 3920);
        assert_int_equal(k8s_quantity_parse(k8s_string_map_get(&n2->capacity, "ephemeral-storage"), &v), 0);
        assert_int_equal(v, 101430960LL * 1024);
}

static void test_pv(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_fixture("core.v1.PersistentVolume.json");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = NULL;
        K8sDecodeError err = {};

        assert_int_equal(k8s_pv_from_json(j, &pv, &err), 0);
        assert_string_equal(pv->host_path->path, "pathValue");
        assert_string_equal(pv->host_path->type, "typeValue");
        assert_string_equal(pv->local_path, "pathValue");
        assert_string_equal(pv->local_fs_type, "fsTypeValue");
        assert_int_equal(pv->in_tree->kind, K8S_IN_TREE_GCE_PD);
        assert_string_equal(pv->in_tree->volume_id, "pdNameValue");
        assert_string_equal(pv->other_source, "glusterfs");
        assert_int_equal(pv->n_node_affinity, 1);
        assert_int_equal(pv->node_affinity[0].n_match_expressions, 1);
        assert_string_equal(pv->node_affinity[0].match_expressions[0].operator, "operatorValue");
        assert_string_equal(pv->node_affinity[0].match_fields[0].values[0], "valuesValue");

        /* A local PV as the local static provisioner writes it. */
        static const char local[] =
                "{\"metadata\":{\"name\":\"local-pv-1\",\"uid\":\"7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d\"},"
                "\"spec\":{\"capacity\":{\"storage\":\"100Gi\"},\"local\":{\"path\":\"/mnt/disks/ssd1\"},"
                "\"accessModes\":[\"ReadWriteOnce\"],\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":["
                "{\"matchExpressions\":[{\"key\":\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":"
                "[\"node-1\"]}]},{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":\"In\",\"values\":"
                "[\"node-9\"]}]}]}}}}";
        static const char nfs[] = "{\"metadata\":{\"name\":\"nfs-1\",\"uid\":\"8a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d\"},"
                                  "\"spec\":{\"nfs\":{\"server\":\"10.0.0.1\",\"path\":\"/export\"},"
                                  "\"accessModes\":[\"ReadWriteMany\"],\"storageClassName\":\"nfs\"}}";
        static const char node1[] = "{\"metadata\":{\"name\":\"node-1\",\"uid\":\"u1\",\"labels\":{"
                                    "\"kubernetes.io/hostname\":\"node-1\"}}}";
        static const char node2[] = "{\"metadata\":{\"name\":\"node-2\",\"uid\":\"u2\",\"labels\":{"
                                    "\"kubernetes.io/hostname\":\"node-2\"}}}";
        static const char node9[] = "{\"metadata\":{\"name\":\"node-9\",\"uid\":\"u9\"}}";
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *l = NULL, *f = NULL;
        _cleanup_(k8s_node_freep) K8sNode *n1 = NULL, *n2 = NULL, *n9 = NULL;

        assert_int_equal(k8s_object_decode(&k8s_kind_pv, local, strlen(local), (void **) &l, &err), 0);
        assert_int_equal(k8s_object_decode(&k8s_kind_pv, nfs, strlen(nfs), (void **) &f, &err), 0);
        assert_int_equal(k8s_object_decode(&k8s_kind_node, node1, strlen(node1), (void **) &n1, &err), 0);
        assert_int_equal(k8s_object_decode(&k8s_kind_node, node2, strlen(node2), (void **) &n2, &err), 0);
        assert_int_equal(k8s_object_decode(&k8s_kind_node, node9, strlen(node9), (void **) &n9, &err), 0);
        assert_string_equal(l->local_path, "/mnt/disks/ssd1");
        assert_null(l->local_fs_type);
        assert_null(l->other_source);
        assert_null(l->host_path);
        assert_true(k8s_pv_node_affinity_matches(l, n1));
        assert_false(k8s_pv_node_affinity_matches(l, n2));
        assert_true(k8s_pv_node_affinity_matches(l, n9)); /* the second term, by field */
        assert_string_equal(f->other_source, "nfs");
        assert_true(k8s_pv_node_affinity_matches(f, n2)); /* no affinity */
        /* An operator it does not know matches nothing. */
        assert_false(k8s_pv_node_affinity_matches(pv, n1));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fixture_every_source),
                cmocka_unit_test(test_kube_api_access),
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_refused),
                cmocka_unit_test(test_validate),
                cmocka_unit_test(test_mount_validate),
                cmocka_unit_test(test_label_selector),
                cmocka_unit_test(test_configmap),
                cmocka_unit_test(test_secret_and_node),
                cmocka_unit_test(test_pv),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
