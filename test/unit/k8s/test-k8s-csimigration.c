/* SPDX-License-Identifier: Apache-2.0 */
/* CSI migration (k8s/csimigration.h): each plugin's translation of a PV and
 * of an inline volume, with the values of csi-translation-lib's own tests
 * (staging/src/k8s.io/csi-translation-lib, 1.25; the test function and case
 * are named next to each case), the topology helpers of in_tree_volume.go,
 * the failures the lib tests, and kubelet's migrated-plugins annotation. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "k8s/csimigration.h"
#include "k8s/objects.h"

/* A PV of the API: "labels" a JSON object or NULL, "spec" the spec's
 * members (source, nodeAffinity, ...). */
static K8sPersistentVolume *pv_make(const char *metadata_extra, const char *spec) {
        char text[8192];
        K8sDecodeError err = {};
        K8sPersistentVolume *pv = NULL;

        snprintf(text, sizeof text, "{\"metadata\":{\"name\":\"pv\",\"uid\":\"u\"%s%s},\"spec\":{%s}}",
                 metadata_extra ? "," : "", metadata_extra ? metadata_extra : "", spec);
        int r = k8s_object_decode(&k8s_kind_pv, text, strlen(text), (void **) &pv, &err);
        if (r < 0)
                print_message("decode: %s: %s\n", err.field, err.problem);
        assert_int_equal(r, 0);
        return pv;
}

/* A pod with one volume, "volume" its JSON object. */
static K8sPod *pod_make(const char *volume) {
        char text[8192];
        K8sDecodeError err = {};
        K8sPod *p = NULL;

        snprintf(text, sizeof text,
                 "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\"},\"spec\":{\"volumes\":[%s]}}",
                 volume);
        int r = k8s_object_decode(&k8s_kind_pod, text, strlen(text), (void **) &p, &err);
        if (r < 0)
                print_message("decode: %s: %s\n", err.field, err.problem);
        assert_int_equal(r, 0);
        assert_int_equal(p->n_volumes, 1);
        return p;
}

static K8sPersistentVolume *translate_pv_ok(const K8sPersistentVolume *pv) {
        K8sPersistentVolume *c = NULL;
        char *error = NULL;
        int r = k8s_csi_translate_pv(pv, &c, &error);
        if (r < 0)
                print_message("translate: %d %s\n", r, error ? error : "");
        assert_int_equal(r, 0);
        assert_null(error);
        assert_non_null(c->csi);
        assert_null(c->in_tree);
        return c;
}

static K8sPersistentVolume *translate_inline_ok(const K8sPodVolume *v, const char *ns) {
        K8sPersistentVolume *c = NULL;
        char *error = NULL;
        int r = k8s_csi_translate_inline(v, ns, &c, &error);
        if (r < 0)
                print_message("translate: %d %s\n", r, error ? error : "");
        assert_int_equal(r, 0);
        assert_non_null(c->csi);
        assert_string_equal(c->volume_mode, "Filesystem");
        return c;
}

/* The error text of a failed translation (-EINVAL), freed by the caller. */
static char *translate_pv_error(const K8sPersistentVolume *pv) {
        K8sPersistentVolume *c = NULL;
        char *error = NULL;
        assert_int_equal(k8s_csi_translate_pv(pv, &c, &error), -EINVAL);
        assert_null(c);
        assert_non_null(error);
        return error;
}

static char *translate_inline_error(const K8sPodVolume *v, const char *ns) {
        K8sPersistentVolume *c = NULL;
        char *error = NULL;
        assert_int_equal(k8s_csi_translate_inline(v, ns, &c, &error), -EINVAL);
        assert_null(c);
        assert_non_null(error);
        return error;
}

static void assert_attr(const K8sPersistentVolume *pv, const char *key, const char *value) {
        const char *v = k8s_string_map_get(&pv->csi->volume_attributes, key);
        if (!value) {
                assert_null(v);
                return;
        }
        assert_non_null(v);
        assert_string_equal(v, value);
}

static void assert_strv(char *const *v, const char *joined) {
        char buf[1024] = "";
        for (char *const *s = v; s && *s; s++) {
                if (s != v)
                        strcat(buf, ",");
                strcat(buf, *s);
        }
        assert_string_equal(buf, joined);
}

/* Term t's match expression i: key In values ("a,b"). */
static void assert_expression(const K8sPersistentVolume *pv, size_t t, size_t i, const char *key,
                              const char *values) {
        assert_true(t < pv->n_node_affinity);
        assert_true(i < pv->node_affinity[t].n_match_expressions);
        const K8sNodeSelectorRequirement *e = &pv->node_affinity[t].match_expressions[i];
        assert_string_equal(e->key, key);
        assert_string_equal(e->operator, "In");
        assert_strv(e->values, values);
}

/* --- AWS EBS ------------------------------------------------------------------ */

static void test_ebs_handles(void **state) {
        /* aws_ebs_test.go TestKubernetesVolumeIDToEBSVolumeID, through a PV. */
        static const struct {
                const char *name, *id, *handle;
        } cases[] = {
                { "Normal ID format", "vol-02399794d890f9375", "vol-02399794d890f9375" },
                { "aws:///{volumeId} format", "aws:///vol-02399794d890f9375", "vol-02399794d890f9375" },
                { "aws://{zone}/{volumeId} format", "aws://us-west-2a/vol-02399794d890f9375", "vol-02399794d890f9375" },
                { "fails on invalid volume ID", "aws://us-west-2a/02399794d890f9375", NULL },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char spec[512];
                print_message("# %s\n", cases[i].name);
                snprintf(spec, sizeof spec, "\"awsElasticBlockStore\":{\"volumeID\":\"%s\"}", cases[i].id);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(NULL, spec);
                assert_string_equal(k8s_csi_migration_driver_of_pv(pv), "ebs.csi.aws.com");
                assert_string_equal(k8s_csi_migration_plugin_of_pv(pv), "kubernetes.io/aws-ebs");
                if (!cases[i].handle) {
                        _cleanup_free_ char *e = translate_pv_error(pv);
                        assert_string_equal(e, "failed to translate Kubernetes ID to EBS Volume ID Invalid format for "
                                               "AWS volume (aws://us-west-2a/02399794d890f9375)");
                        continue;
                }
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->driver, "ebs.csi.aws.com");
                assert_string_equal(c->csi->volume_handle, cases[i].handle);
                /* "partition": "0" is always set */
                assert_attr(c, "partition", "0");
                assert_null(c->csi->fs_type);
                assert_false(c->csi->read_only);
                assert_string_equal(c->meta.name, "pv");
                assert_int_equal(c->n_node_affinity, 0);
        }
}

static void test_ebs_inline(void **state) {
        /* aws_ebs_test.go TestTranslateInTreeInlineVolumeToCSI */
        static const struct {
                const char *name, *id;
                bool fails;
        } cases[] = {
                { "Normal ID format", "vol-02399794d890f9375", false },
                { "aws:///{volumeId} format", "aws:///vol-02399794d890f9375", false },
                { "aws://{zone}/{volumeId} format", "aws://us-west-2a/vol-02399794d890f9375", false },
                { "fails on invalid volume ID", "aws://us-west-2a/02399794d890f9375", true },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char vol[512];
                print_message("# %s\n", cases[i].name);
                snprintf(vol, sizeof vol, "{\"name\":\"volume\",\"awsElasticBlockStore\":{\"volumeID\":\"%s\"}}",
                         cases[i].id);
                _cleanup_(k8s_pod_freep) K8sPod *p = pod_make(vol);
                assert_string_equal(k8s_csi_migration_driver_of_pod_volume(&p->volumes[0]), "ebs.csi.aws.com");
                assert_string_equal(k8s_pod_volume_source(&p->volumes[0]), "awsElasticBlockStore");
                assert_null(p->volumes[0].other_source);
                if (cases[i].fails) {
                        _cleanup_free_ char *e = translate_inline_error(&p->volumes[0], "");
                        assert_non_null(strstr(e, "Invalid format for AWS volume"));
                        continue;
                }
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], "");
                assert_string_equal(c->meta.name, "ebs.csi.aws.com-vol-02399794d890f9375");
                assert_string_equal(c->csi->volume_handle, "vol-02399794d890f9375");
                assert_strv(c->access_modes, "ReadWriteOnce");
                assert_attr(c, "partition", "0");
        }
        /* "fails on empty volume source": not an in-tree source at all */
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_make("{\"name\":\"volume\",\"emptyDir\":{}}");
        K8sPersistentVolume *c = NULL;
        char *e = NULL;
        assert_int_equal(k8s_csi_translate_inline(&p->volumes[0], "", &c, &e), -EOPNOTSUPP);
        assert_null(k8s_csi_migration_driver_of_pod_volume(&p->volumes[0]));
}

static void test_ebs_fields_and_topology(void **state) {
        /* translate_test.go makeAWSEBSPV: vol01, ext3, partition 1, readOnly. */
#define EBS "\"awsElasticBlockStore\":{\"volumeID\":\"vol01\",\"fsType\":\"ext3\",\"partition\":1,\"readOnly\":true}"
        static const struct {
                const char *name, *labels, *spec;
                const char *values;
        } cases[] = {
                /* translate_test.go TestTopologyTranslation */
                { "AWS EBS with beta zone labels",
                  "\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"us-east-1a\","
                  "\"failure-domain.beta.kubernetes.io/region\":\"us-east-1\"}",
                  EBS, "us-east-1a" },
                { "AWS EBS with beta zone labels and topology",
                  "\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"us-east-1a\","
                  "\"failure-domain.beta.kubernetes.io/region\":\"us-east-1\"}",
                  EBS ",\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
                  "\"failure-domain.beta.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"us-east-2a\"]}]}]}}",
                  "us-east-2a" },
                { "AWS EBS with GA zone labels",
                  "\"labels\":{\"topology.kubernetes.io/zone\":\"us-east-1a\","
                  "\"topology.kubernetes.io/region\":\"us-east-1\"}",
                  EBS, "us-east-1a" },
                { "AWS EBS with GA zone labels and topology",
                  "\"labels\":{\"topology.kubernetes.io/zone\":\"us-east-1a\","
                  "\"topology.kubernetes.io/region\":\"us-east-1\"}",
                  EBS ",\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
                  "\"topology.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"us-east-2a\"]}]}]}}",
                  "us-east-2a" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("# %s\n", cases[i].name);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(cases[i].labels, cases[i].spec);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->volume_handle, "vol01");
                assert_string_equal(c->csi->fs_type, "ext3");
                assert_true(c->csi->read_only);
                assert_attr(c, "partition", "1");
                assert_int_equal(c->n_node_affinity, 1);
                assert_int_equal(c->node_affinity[0].n_match_expressions, 1);
                assert_expression(c, 0, 0, "topology.ebs.csi.aws.com/zone", cases[i].values);
                /* the labels stay, the original is untouched */
                assert_non_null(k8s_string_map_get(&c->labels, strstr(cases[i].labels, "beta")
                                                                       ? "failure-domain.beta.kubernetes.io/zone"
                                                                       : "topology.kubernetes.io/zone"));
                assert_null(pv->csi);
                assert_non_null(pv->in_tree);
        }
#undef EBS
}

static void test_copied_fields(void **state) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(
                "\"annotations\":{\"pv.beta.kubernetes.io/gid\":\"1234\",\"other\":\"x\"}",
                "\"awsElasticBlockStore\":{\"volumeID\":\"vol-1\"},\"accessModes\":[\"ReadWriteOnce\"],"
                "\"mountOptions\":[\"debug\"],\"volumeMode\":\"Block\",\"capacity\":{\"storage\":\"1Gi\"},"
                "\"claimRef\":{\"namespace\":\"ns\",\"name\":\"c\",\"uid\":\"cu\"}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);

        assert_string_equal(pv->gid_annotation, "1234");
        assert_string_equal(c->gid_annotation, "1234");
        assert_string_equal(c->meta.uid, "u");
        assert_strv(c->access_modes, "ReadWriteOnce");
        assert_strv(c->mount_options, "debug");
        assert_string_equal(c->volume_mode, "Block");
        assert_string_equal(c->capacity, "1Gi");
        assert_true(c->has_claim_ref);
        assert_string_equal(c->claim_namespace, "ns");
        assert_string_equal(c->claim_name, "c");
        assert_string_equal(c->claim_uid, "cu");
}

static void test_not_in_tree(void **state) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *nfs = pv_make(NULL, "\"nfs\":{\"server\":\"s\",\"path\":\"/\"}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *csi = pv_make(NULL, "\"csi\":{\"driver\":\"d\",\"volumeHandle\":\"h\"}");
        K8sPersistentVolume *c = NULL;
        char *e = NULL;

        assert_string_equal(nfs->other_source, "nfs");
        assert_int_equal(k8s_csi_translate_pv(nfs, &c, &e), -EOPNOTSUPP);
        assert_int_equal(k8s_csi_translate_pv(csi, &c, &e), -EOPNOTSUPP);
        assert_null(c);
        assert_null(e);
        assert_null(k8s_csi_migration_driver_of_pv(nfs));
        assert_null(k8s_csi_migration_plugin_of_pv(csi));
}

/* --- names and the CSINode annotation ---------------------------------------------- */

static void test_plugin_names(void **state) {
        /* translate_test.go TestPluginNameMappings, and translate.go's table */
        assert_string_equal(k8s_csi_migration_plugin_of_driver("ebs.csi.aws.com"), "kubernetes.io/aws-ebs");
        assert_string_equal(k8s_csi_migration_plugin_of_driver("pd.csi.storage.gke.io"), "kubernetes.io/gce-pd");
        assert_string_equal(k8s_csi_migration_plugin_of_driver("disk.csi.azure.com"), "kubernetes.io/azure-disk");
        assert_string_equal(k8s_csi_migration_plugin_of_driver("file.csi.azure.com"), "kubernetes.io/azure-file");
        assert_string_equal(k8s_csi_migration_plugin_of_driver("cinder.csi.openstack.org"), "kubernetes.io/cinder");
        assert_string_equal(k8s_csi_migration_plugin_of_driver("csi.vsphere.vmware.com"),
                            "kubernetes.io/vsphere-volume");
        /* CSIMigrationPortworx is off by default */
        assert_null(k8s_csi_migration_plugin_of_driver("pxd.portworx.com"));
        assert_false(k8s_csi_migration_plugin_on("kubernetes.io/portworx-volume"));
        assert_true(k8s_csi_migration_plugin_on("kubernetes.io/cinder"));
        assert_null(k8s_csi_migration_plugin_of_driver("hostpath.csi.k8s.io"));
        assert_null(k8s_csi_migration_plugin_of_driver(NULL));
}

static void test_annotation(void **state) {
        char *drivers[] = { "pd.csi.storage.gke.io", "hostpath.csi.k8s.io", "ebs.csi.aws.com", NULL };
        char *one[] = { "cinder.csi.openstack.org", NULL };
        char *none[] = { "hostpath.csi.k8s.io", "pxd.portworx.com", NULL };
        char *all[] = { "csi.vsphere.vmware.com", "file.csi.azure.com", "disk.csi.azure.com", "ebs.csi.aws.com",
                        "pd.csi.storage.gke.io", "cinder.csi.openstack.org", "ebs.csi.aws.com", NULL };
        char *s = NULL;

        /* sorted, comma-joined (nodeinfomanager.go setMigrationAnnotation) */
        assert_int_equal(k8s_csi_migrated_plugins_annotation(drivers, &s), 0);
        assert_string_equal(s, "kubernetes.io/aws-ebs,kubernetes.io/gce-pd");
        free(s);
        assert_int_equal(k8s_csi_migrated_plugins_annotation(one, &s), 0);
        assert_string_equal(s, "kubernetes.io/cinder");
        free(s);
        assert_int_equal(k8s_csi_migrated_plugins_annotation(all, &s), 0);
        assert_string_equal(s, "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,"
                               "kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/vsphere-volume");
        free(s);
        /* none: no key, never "" */
        s = (char *) 1;
        assert_int_equal(k8s_csi_migrated_plugins_annotation(none, &s), 0);
        assert_null(s);
        s = (char *) 1;
        assert_int_equal(k8s_csi_migrated_plugins_annotation(NULL, &s), 0);
        assert_null(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ebs_handles),
                cmocka_unit_test(test_ebs_inline),
                cmocka_unit_test(test_ebs_fields_and_topology),
                cmocka_unit_test(test_copied_fields),
                cmocka_unit_test(test_not_in_tree),
                cmocka_unit_test(test_plugin_names),
                cmocka_unit_test(test_annotation),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
