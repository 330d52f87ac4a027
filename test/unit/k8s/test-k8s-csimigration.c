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
#include "k8s/csimigration/internal.h"
#include "k8s/objects.h"
#include "k8s/writers.h"

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

/* Frees the terms of a PV on the stack and empties them. */
static void k8s_node_selector_terms_free_for_test(K8sPersistentVolume *pv) {
        for (size_t i = 0; i < pv->n_node_affinity; i++) {
                K8sNodeSelectorTerm *t = &pv->node_affinity[i];
                for (size_t j = 0; j < t->n_match_expressions; j++) {
                        free(t->match_expressions[j].key);
                        free(t->match_expressions[j].operator);
                        k8s_strv_free(t->match_expressions[j].values);
                }
                free(t->match_expressions);
        }
        free(pv->node_affinity);
        pv->node_affinity = NULL;
        pv->n_node_affinity = 0;
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
        /* url.Parse failures (aws_ebs.go "Invalid disk name (%s): %v") */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *bad = pv_make(NULL, "\"awsElasticBlockStore\":{\"volumeID\":\"aws://z/vol-%zz\"}");
        _cleanup_free_ char *be = translate_pv_error(bad);
        assert_string_equal(be, "failed to translate Kubernetes ID to EBS Volume ID Invalid disk name (aws://z/vol-%zz): "
                                "parse \"aws://z/vol-%zz\": invalid URL escape \"%zz\"");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *esc = pv_make(NULL, "\"awsElasticBlockStore\":{\"volumeID\":\"aws://z/vol-%41b\"}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *escc = translate_pv_ok(esc);
        assert_string_equal(escc->csi->volume_handle, "vol-Ab");
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

/* --- GCE PD ------------------------------------------------------------------- */

static void test_gce_pd_handles(void **state) {
        /* gce_pd_test.go TestTranslateInTreePVToCSIVolIDFmt */
        static const struct {
                const char *desc, *key, *value, *handle;
        } cases[] = {
                { "beta topology key zonal", "failure-domain.beta.kubernetes.io/zone", "us-east1-a",
                  "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name" },
                { "v1 topology key zonal", "topology.kubernetes.io/zone", "us-east1-a",
                  "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name" },
                { "beta topology key regional", "failure-domain.beta.kubernetes.io/zone", "us-central1-a__us-central1-c",
                  "projects/UNSPECIFIED/regions/us-central1/disks/pd-name" },
                { "v1 topology key regional", "topology.kubernetes.io/zone", "us-central1-a__us-central1-c",
                  "projects/UNSPECIFIED/regions/us-central1/disks/pd-name" },
                /* no zone label: UNSPECIFIED (gce_pd.go "Unspecified" branch) */
                { "no label", "other", "x", "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd-name" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char labels[256];
                print_message("# %s\n", cases[i].desc);
                snprintf(labels, sizeof labels, "\"labels\":{\"%s\":\"%s\"}", cases[i].key, cases[i].value);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv =
                        pv_make(labels, "\"gcePersistentDisk\":{\"pdName\":\"pd-name\"}");
                assert_string_equal(k8s_csi_migration_driver_of_pv(pv), "pd.csi.storage.gke.io");
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->driver, "pd.csi.storage.gke.io");
                assert_string_equal(c->csi->volume_handle, cases[i].handle);
                /* partition 0: "" (gce_pd.go) */
                assert_attr(c, "partition", "");
        }
}

static void test_gce_pd_region_errors(void **state) {
        /* gce_pd.go gceGetRegionFromZones failures, through the zone label */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *two = pv_make(
                "\"labels\":{\"topology.kubernetes.io/zone\":\"us-central1-a__europe-west1-b\"}",
                "\"gcePersistentDisk\":{\"pdName\":\"pd\"}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *bad = pv_make(
                "\"labels\":{\"topology.kubernetes.io/zone\":\"us-central1-a__uscentral1\"}",
                "\"gcePersistentDisk\":{\"pdName\":\"pd\"}");
        _cleanup_free_ char *e1 = translate_pv_error(two), *e2 = translate_pv_error(bad);

        assert_string_equal(e1, "failed to get region from zones: multiple or no regions gotten from zones, got: "
                                "map[europe-west1:{} us-central1:{}]");
        assert_string_equal(e2, "failed to get region from zones: zone in unexpected format, expected: "
                                "{locale}-{region}-{zone}, got: uscentral1");
}

static void test_gce_pd_topology(void **state) {
        /* translate_test.go TestTopologyTranslation, makeGCEPDPV: test-disk, ext4 */
#define PD "\"gcePersistentDisk\":{\"pdName\":\"test-disk\",\"fsType\":\"ext4\"}"
#define AFF(key, values) ",\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"" \
                key "\",\"operator\":\"In\",\"values\":[" values "]}]}]}}"
#define BETA_LABELS "\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"us-east-1a\"," \
                    "\"failure-domain.beta.kubernetes.io/region\":\"us-east-1\"}"
        static const struct {
                const char *name, *labels, *spec, *values;
        } cases[] = {
                { "GCE PD with beta zone labels", BETA_LABELS, PD, "us-east-1a" },
                { "GCE PD with GA kubernetes zone labels",
                  "\"labels\":{\"topology.kubernetes.io/zone\":\"us-east-1a\","
                  "\"topology.kubernetes.io/region\":\"us-east-1\"}",
                  PD, "us-east-1a" },
                { "GCE PD with existing topology (beta keys)", NULL,
                  PD AFF("failure-domain.beta.kubernetes.io/zone", "\"us-east-2a\""), "us-east-2a" },
                { "GCE PD with existing topology (CSI keys)", NULL, PD AFF("topology.gke.io/zone", "\"us-east-2a\""),
                  "us-east-2a" },
                { "GCE PD with zone labels and topology", BETA_LABELS,
                  PD AFF("failure-domain.beta.kubernetes.io/zone", "\"us-east-2a\""), "us-east-2a" },
                { "GCE PD with regional zones",
                  "\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"europe-west1-b__europe-west1-c\"}", PD,
                  "europe-west1-b,europe-west1-c" },
                { "GCE PD with regional topology", NULL,
                  PD AFF("topology.kubernetes.io/zone", "\"europe-west1-b\",\"europe-west1-c\""),
                  "europe-west1-b,europe-west1-c" },
                { "GCE PD with Beta regional zone and topology",
                  "\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"europe-west1-b__europe-west1-c\"}",
                  PD AFF("failure-domain.beta.kubernetes.io/zone", "\"europe-west1-f\",\"europe-west1-g\""),
                  "europe-west1-f,europe-west1-g" },
                { "GCE PD with GA regional zone and topology",
                  "\"labels\":{\"topology.kubernetes.io/zone\":\"europe-west1-b__europe-west1-c\"}",
                  PD AFF("topology.kubernetes.io/zone", "\"europe-west1-f\",\"europe-west1-g\""),
                  "europe-west1-f,europe-west1-g" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("# %s\n", cases[i].name);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(cases[i].labels, cases[i].spec);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->fs_type, "ext4");
                assert_int_equal(c->n_node_affinity, 1);
                assert_int_equal(c->node_affinity[0].n_match_expressions, 1);
                assert_expression(c, 0, 0, "topology.gke.io/zone", cases[i].values);
        }

        /* "GCE PD with multiple node selector terms" */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *multi = pv_make(
                NULL, PD ",\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":["
                         "{\"matchExpressions\":[{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\","
                         "\"values\":[\"europe-west1-f\"]}]},"
                         "{\"matchExpressions\":[{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\","
                         "\"values\":[\"europe-west1-g\"]}]}]}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(multi);
        assert_int_equal(c->n_node_affinity, 2);
        assert_expression(c, 0, 0, "topology.gke.io/zone", "europe-west1-f");
        assert_expression(c, 1, 0, "topology.gke.io/zone", "europe-west1-g");

        /* in_tree_volume_test.go TestTranslateTopologyFromInTreeToCSI */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *ga = pv_make(
                "\"labels\":{\"topology.kubernetes.io/zone\":\"us-east1-a\",\"topology.kubernetes.io/region\":\"us-east1\"}",
                PD ",\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":["
                   "{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"us-east1-a\"]},"
                   "{\"key\":\"topology.kubernetes.io/region\",\"operator\":\"In\",\"values\":[\"us-east1\"]}]}]}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *gac = translate_pv_ok(ga);
        /* "Replace GA Kubernetes Zone Topology to GCE CSI Topology" */
        assert_expression(gac, 0, 0, "topology.gke.io/zone", "us-east1-a");
        assert_expression(gac, 0, 1, "topology.kubernetes.io/region", "us-east1");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *beta = pv_make(
                "\"labels\":{\"topology.kubernetes.io/zone\":\"us-east1-a\",\"topology.kubernetes.io/region\":\"us-east1\"}",
                PD ",\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":["
                   "{\"key\":\"failure-domain.beta.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"us-west2-b\"]},"
                   "{\"key\":\"failure-domain.beta.kubernetes.io/region\",\"operator\":\"In\",\"values\":[\"us-west2\"]}"
                   "]}]}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *betac = translate_pv_ok(beta);
        /* "Replace Beta Kubernetes Topology to GCE CSI Topology and upgrade region label" */
        assert_expression(betac, 0, 0, "topology.gke.io/zone", "us-west2-b");
        assert_expression(betac, 0, 1, "topology.kubernetes.io/region", "us-west2");
#undef PD
#undef AFF
#undef BETA_LABELS
}

static void test_gce_pd_access_modes(void **state) {
        /* gce_pd_test.go TestBackwardCompatibleAccessModes */
        static const struct {
                const char *name, *modes, *expected;
        } cases[] = {
                { "ROX", "\"ReadOnlyMany\"", "ReadOnlyMany" },
                { "RWO", "\"ReadWriteOnce\"", "ReadWriteOnce" },
                { "RWX", "\"ReadWriteMany\"", "ReadWriteOnce" },
                { "RWO, ROX", "\"ReadOnlyMany\",\"ReadWriteOnce\"", "ReadWriteOnce" },
                { "RWO, RWX", "\"ReadWriteOnce\",\"ReadWriteMany\"", "ReadWriteOnce" },
                { "RWX, ROX", "\"ReadWriteMany\",\"ReadOnlyMany\"", "ReadWriteOnce" },
                { "RWX, ROX, RWO", "\"ReadWriteMany\",\"ReadWriteOnce\",\"ReadOnlyMany\"", "ReadWriteOnce" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char spec[512];
                print_message("# %s\n", cases[i].name);
                snprintf(spec, sizeof spec, "\"gcePersistentDisk\":{\"pdName\":\"pd\"},\"accessModes\":[%s]",
                         cases[i].modes);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(NULL, spec);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_strv(c->access_modes, cases[i].expected);
        }
}

static void test_gce_pd_inline(void **state) {
        /* gce_pd_test.go TestInlineReadOnly */
        _cleanup_(k8s_pod_freep) K8sPod *p =
                pod_make("{\"name\":\"v\",\"gcePersistentDisk\":{\"pdName\":\"foo\",\"readOnly\":true,\"partition\":2}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], "ns");
        assert_true(c->csi->read_only);
        assert_strv(c->access_modes, "ReadOnlyMany");
        /* gce_pd.go TranslateInTreeInlineVolumeToCSI: name and handle */
        assert_string_equal(c->meta.name, "pd.csi.storage.gke.io-foo");
        assert_string_equal(c->csi->volume_handle, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/foo");
        assert_attr(c, "partition", "2");

        _cleanup_(k8s_pod_freep) K8sPod *rw = pod_make("{\"name\":\"v\",\"gcePersistentDisk\":{\"pdName\":\"foo\"}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *crw = translate_inline_ok(&rw->volumes[0], "ns");
        assert_strv(crw->access_modes, "ReadWriteOnce");
}

/* --- Azure disk ------------------------------------------------------------------ */

/* The lib's tests leave kind, cachingMode and fsType nil; an object of the
 * API server has its defaults, which the decoder applies. */
static void unset_azure_defaults(K8sInTreeSource *s) {
        free(s->azure_kind);
        free(s->caching_mode);
        free(s->fs_type);
        s->azure_kind = s->caching_mode = s->fs_type = NULL;
}

static void test_azure_disk(void **state) {
        /* azure_disk_test.go TestTranslateAzureDiskInTreeInlineVolumeToCSI "azure disk volume" */
        _cleanup_(k8s_pod_freep) K8sPod *p =
                pod_make("{\"name\":\"v\",\"azureDisk\":{\"diskName\":\"diskname\",\"diskURI\":\"datadiskuri\"}}");
        unset_azure_defaults(p->volumes[0].in_tree);
        assert_string_equal(k8s_csi_migration_driver_of_pod_volume(&p->volumes[0]), "disk.csi.azure.com");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], "");
        assert_string_equal(c->meta.name, "datadiskuri");
        assert_string_equal(c->csi->driver, "disk.csi.azure.com");
        assert_string_equal(c->csi->volume_handle, "datadiskuri");
        assert_int_equal(c->csi->volume_attributes.n, 1);
        assert_attr(c, "kind", "Managed");
        assert_strv(c->access_modes, "ReadWriteOnce");
        assert_null(c->csi->fs_type);

        /* "azure disk volume with non-managed kind" (Dedicated) */
        _cleanup_(k8s_pod_freep) K8sPod *d = pod_make(
                "{\"name\":\"v\",\"azureDisk\":{\"diskName\":\"diskname\",\"diskURI\":\"datadiskuri\",\"kind\":\"Dedicated\"}}");
        _cleanup_free_ char *e = translate_inline_error(&d->volumes[0], "");
        assert_string_equal(e, "kind(Dedicated) is not supported in csi migration");

        /* azure_disk_test.go TestTranslateAzureDiskInTreePVToCSI "azure disk volume" */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(
                NULL, "\"azureDisk\":{\"cachingMode\":\"cachingmode\",\"diskName\":\"name\",\"diskURI\":"
                      "\"/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/name\","
                      "\"fsType\":\"fstype\",\"readOnly\":true}");
        free(pv->in_tree->azure_kind);
        pv->in_tree->azure_kind = NULL;
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *pc = translate_pv_ok(pv);
        assert_string_equal(pc->csi->volume_handle,
                            "/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/name");
        assert_string_equal(pc->csi->fs_type, "fstype");
        assert_true(pc->csi->read_only);
        assert_int_equal(pc->csi->volume_attributes.n, 3);
        assert_attr(pc, "cachingmode", "cachingmode");
        assert_attr(pc, "fstype", "fstype");
        assert_attr(pc, "kind", "Managed");

        /* "azure disk volume with non-managed kind" */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *dpv = pv_make(
                NULL, "\"azureDisk\":{\"diskName\":\"n\",\"diskURI\":\"u\",\"kind\":\"Dedicated\"}");
        _cleanup_free_ char *e2 = translate_pv_error(dpv);
        assert_string_equal(e2, "kind(Dedicated) is not supported in csi migration");

        /* As the API server returns it without kind: defaulted to Shared
         * (SetDefaults_AzureDiskVolumeSource), which does not migrate. */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *shared = pv_make(NULL, "\"azureDisk\":{\"diskName\":\"n\",\"diskURI\":\"u\"}");
        assert_string_equal(shared->in_tree->caching_mode, "ReadWrite");
        assert_string_equal(shared->in_tree->fs_type, "ext4");
        _cleanup_free_ char *e3 = translate_pv_error(shared);
        assert_string_equal(e3, "kind(Shared) is not supported in csi migration");
        /* kind Managed (what the in-tree provisioner writes), case-insensitive */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *managed =
                pv_make(NULL, "\"azureDisk\":{\"diskName\":\"n\",\"diskURI\":\"u\",\"kind\":\"managed\"}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *mc = translate_pv_ok(managed);
        assert_attr(mc, "cachingmode", "ReadWrite");
        assert_attr(mc, "fstype", "ext4");
        assert_attr(mc, "kind", "Managed");
}

/* --- Azure file ------------------------------------------------------------------ */

static void test_azure_file_pv(void **state) {
        /* azure_file_test.go TestTranslateAzureFileInTreePVToCSI */
        static const struct {
                const char *name, *annotations, *spec, *handle;
        } cases[] = {
                { "return error if secret namespace could not be found",
                  "\"annotations\":{\"kubernetes.io/azure-file-resource-group\":\"rg\"}",
                  "\"azureFile\":{\"shareName\":\"sharename\",\"secretName\":\"secretname\",\"readOnly\":true}", NULL },
                { "azure file volume", NULL,
                  "\"azureFile\":{\"shareName\":\"sharename\",\"secretName\":\"secretname\","
                  "\"secretNamespace\":\"secretnamespace\",\"readOnly\":true}",
                  "#secretname#sharename#uuid#secretnamespace" },
                { "azure file volume with rg annotation",
                  "\"annotations\":{\"kubernetes.io/azure-file-resource-group\":\"rg\"}",
                  "\"azureFile\":{\"shareName\":\"sharename\",\"secretName\":\"secretname\","
                  "\"secretNamespace\":\"secretnamespace\",\"readOnly\":true}",
                  "rg#secretname#sharename#uuid#secretnamespace" },
                { "get secret namespace from ClaimRef when it's missing in pv spec source",
                  "\"annotations\":{\"kubernetes.io/azure-file-resource-group\":\"rg\"}",
                  "\"azureFile\":{\"shareName\":\"sharename\",\"secretName\":\"secretname\",\"readOnly\":true},"
                  "\"claimRef\":{\"namespace\":\"secretnamespace\"}",
                  "rg#secretname#sharename#uuid#secretnamespace" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char meta[256];
                print_message("# %s\n", cases[i].name);
                /* the PV is named "uuid" in the lib's cases */
                snprintf(meta, sizeof meta, "\"labels\":{}%s%s", cases[i].annotations ? "," : "",
                         cases[i].annotations ? cases[i].annotations : "");
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(meta, cases[i].spec);
                free(pv->meta.name);
                assert_non_null(pv->meta.name = strdup("uuid"));
                if (!cases[i].handle) {
                        _cleanup_free_ char *e = translate_pv_error(pv);
                        assert_string_equal(e, "could not find a secret namespace in PersistentVolumeSource or ClaimRef");
                        continue;
                }
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->driver, "file.csi.azure.com");
                assert_string_equal(c->csi->volume_handle, cases[i].handle);
                assert_true(c->csi->read_only);
                assert_int_equal(c->csi->volume_attributes.n, 1);
                assert_attr(c, "sharename", "sharename");
                assert_string_equal(c->csi->node_stage_secret.name, "secretname");
                assert_string_equal(c->csi->node_stage_secret.namespace, "secretnamespace");
                assert_null(c->csi->fs_type);
        }
}

static void test_azure_file_account(void **state) {
        /* azure_file_test.go TestGetStorageAccount, through the handle; the
         * lib falls back to the secret name when it does not match. */
        static const struct {
                const char *secret, *account;
        } cases[] = {
                { "azure-storage-account-accountname-secret", "accountname" },
                { "azure-storage-account-accountname-dup-secret", "accountname-dup" },
                { "invalid", "invalid" },
                { "azure-storage-account--secret", "azure-storage-account--secret" },
                { "x-azure-storage-account-a-secret-secret", "a-secret" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char vol[512], handle[512];
                print_message("# %s\n", cases[i].secret);
                snprintf(vol, sizeof vol, "{\"name\":\"vol\",\"azureFile\":{\"secretName\":\"%s\",\"shareName\":\"sh\"}}",
                         cases[i].secret);
                _cleanup_(k8s_pod_freep) K8sPod *p = pod_make(vol);
                /* inline: "#<account>#<share>#<volume name>#<pod namespace>" */
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], "podns");
                snprintf(handle, sizeof handle, "#%s#sh#vol#podns", cases[i].account);
                assert_string_equal(c->csi->volume_handle, handle);
                assert_string_equal(c->meta.name, handle);
                assert_string_equal(c->csi->node_stage_secret.name, cases[i].secret);
                assert_string_equal(c->csi->node_stage_secret.namespace, "podns");
                assert_strv(c->access_modes, "ReadWriteMany");
        }
        /* no pod namespace: "default" */
        _cleanup_(k8s_pod_freep) K8sPod *p =
                pod_make("{\"name\":\"vol\",\"azureFile\":{\"secretName\":\"s\",\"shareName\":\"sh\"}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], NULL);
        assert_string_equal(c->csi->volume_handle, "#s#sh#vol#default");
        assert_string_equal(c->csi->node_stage_secret.namespace, "default");
}

/* --- Cinder, vSphere, Portworx ------------------------------------------------------ */

static void test_cinder(void **state) {
        /* translate_test.go TestTopologyTranslation, makeCinderPV: vol1, ext4 */
        static const struct {
                const char *name, *spec, *values;
        } cases[] = {
                { "OpenStack Cinder with zone labels", "\"cinder\":{\"volumeID\":\"vol1\",\"fsType\":\"ext4\"}",
                  "us-east-1a" },
                { "OpenStack Cinder with zone labels and topology",
                  "\"cinder\":{\"volumeID\":\"vol1\",\"fsType\":\"ext4\"},\"nodeAffinity\":{\"required\":"
                  "{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"failure-domain.beta.kubernetes.io/zone\","
                  "\"operator\":\"In\",\"values\":[\"us-east-2a\"]}]}]}}",
                  "us-east-2a" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("# %s\n", cases[i].name);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv =
                        pv_make("\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"us-east-1a\","
                                "\"failure-domain.beta.kubernetes.io/region\":\"us-east-1\"}",
                                cases[i].spec);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->driver, "cinder.csi.openstack.org");
                assert_string_equal(c->csi->volume_handle, "vol1");
                assert_string_equal(c->csi->fs_type, "ext4");
                assert_false(c->csi->read_only);
                assert_int_equal(c->csi->volume_attributes.n, 0);
                assert_int_equal(c->node_affinity[0].n_match_expressions, 1);
                assert_expression(c, 0, 0, "topology.cinder.csi.openstack.org/zone", cases[i].values);
        }
        /* openstack_cinder.go inline: "<driver>-<volumeID>", RWO; the secretRef is dropped */
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_make(
                "{\"name\":\"v\",\"cinder\":{\"volumeID\":\"id-1\",\"readOnly\":true,\"secretRef\":{\"name\":\"s\"}}}");
        assert_string_equal(p->volumes[0].in_tree->secret_name, "s");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], "ns");
        assert_string_equal(c->meta.name, "cinder.csi.openstack.org-id-1");
        assert_string_equal(c->csi->volume_handle, "id-1");
        assert_true(c->csi->read_only);
        assert_null(c->csi->node_stage_secret.name);
        assert_null(c->csi->node_publish_secret.name);
        assert_strv(c->access_modes, "ReadWriteOnce");
}

static void test_vsphere(void **state) {
#define VMDK "[vsanDatastore] 6785a85e-268e-6352-a2e8-02008b7afadd/kubernetes-dynamic-pvc-68734c9f-a679-42e6-a694-39632c51e31f.vmdk"
#define VSPHERE "\"vsphereVolume\":{\"volumePath\":\"" VMDK "\",\"fsType\":\"ext4\"," \
                "\"storagePolicyName\":\"vSAN Default Storage Policy\"},\"accessModes\":[\"ReadWriteOnce\"]"
        /* vsphere_volume_test.go TestTranslateVSphereInTreePVToCSI */
        static const struct {
                const char *name, *labels;
                const char *zone, *region;
        } cases[] = {
                { "translate valid vSphere in-tree PV to vSphere CSI PV", NULL, NULL, NULL },
                { "translate valid vSphere in-tree PV with beta topology labels to vSphere CSI PV",
                  "\"labels\":{\"failure-domain.beta.kubernetes.io/zone\":\"z1\","
                  "\"failure-domain.beta.kubernetes.io/region\":\"r1\"}",
                  "z1", "r1" },
                { "translate valid vSphere in-tree PV with GA topology labels to vSphere CSI PV",
                  "\"labels\":{\"topology.kubernetes.io/zone\":\"z1\",\"topology.kubernetes.io/region\":\"r1\"}", "z1",
                  "r1" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("# %s\n", cases[i].name);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(cases[i].labels, VSPHERE);
                _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_pv_ok(pv);
                assert_string_equal(c->csi->driver, "csi.vsphere.vmware.com");
                assert_string_equal(c->csi->volume_handle, VMDK);
                assert_string_equal(c->csi->fs_type, "ext4");
                assert_int_equal(c->csi->volume_attributes.n, 1);
                assert_attr(c, "storagepolicyname", "vSAN Default Storage Policy");
                assert_strv(c->access_modes, "ReadWriteOnce");
                if (!cases[i].zone) {
                        assert_int_equal(c->n_node_affinity, 0);
                        continue;
                }
                assert_int_equal(c->n_node_affinity, 1);
                assert_int_equal(c->node_affinity[0].n_match_expressions, 2);
                assert_expression(c, 0, 0, "topology.csi.vmware.com/zone", cases[i].zone);
                assert_expression(c, 0, 1, "topology.csi.vmware.com/region", cases[i].region);
        }
        /* TestTranslatevSphereInTreeInlineVolumeToCSI */
        _cleanup_(k8s_pod_freep) K8sPod *p = pod_make(
                "{\"name\":\"inlinevolume\",\"vsphereVolume\":{\"volumePath\":\"[vsanDatastore] volume/inlinevolume.vmdk\","
                "\"fsType\":\"ext4\"}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = translate_inline_ok(&p->volumes[0], "");
        assert_string_equal(c->meta.name, "csi.vsphere.vmware.com-[vsanDatastore] volume/inlinevolume.vmdk");
        assert_string_equal(c->csi->volume_handle, "[vsanDatastore] volume/inlinevolume.vmdk");
        assert_string_equal(c->csi->fs_type, "ext4");
        assert_int_equal(c->csi->volume_attributes.n, 0);
        assert_strv(c->access_modes, "ReadWriteOnce");
#undef VMDK
#undef VSPHERE
}

static void test_portworx(void **state) {
        /* CSIMigrationPortworx is off: nothing is migrated to it */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = pv_make(
                NULL, "\"portworxVolume\":{\"volumeID\":\"ID1111\",\"fsType\":\"type\"},\"accessModes\":[\"ReadWriteOnce\"],"
                      "\"claimRef\":{\"name\":\"test-pvc\",\"namespace\":\"default\"}");
        K8sPersistentVolume *none = NULL;
        char *e = NULL;
        assert_int_equal(k8s_csi_translate_pv(pv, &none, &e), -EOPNOTSUPP);
        assert_null(k8s_csi_migration_driver_of_pv(pv));
        assert_string_equal(k8s_csi_migration_plugin_of_pv(pv), "kubernetes.io/portworx-volume");

        /* its translation, for when the gate is on: portworx_test.go
         * TestTranslatePortworxInTreePVToCSI "normal" */
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = calloc(1, sizeof *c);
        assert_int_equal(migration_plugin_portworx.translate_pv(pv->in_tree, c, &e), 0);
        assert_string_equal(c->csi->driver, "pxd.portworx.com");
        assert_string_equal(c->csi->volume_handle, "ID1111");
        assert_string_equal(c->csi->fs_type, "type");
        assert_int_equal(c->csi->volume_attributes.n, 0);
        /* TestTranslatePortworxInTreeInlineVolumeToCSI "normal" */
        _cleanup_(k8s_pod_freep) K8sPod *p =
                pod_make("{\"name\":\"PortworxVol\",\"portworxVolume\":{\"volumeID\":\"ID\",\"fsType\":\"type\"}}");
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *ci = calloc(1, sizeof *ci);
        assert_int_equal(migration_plugin_portworx.translate_inline(p->volumes[0].in_tree, "PortworxVol", "ns", ci, &e), 0);
        assert_string_equal(ci->meta.name, "pxd.portworx.com-ID");
        assert_string_equal(ci->csi->volume_handle, "ID");
        assert_strv(ci->access_modes, "ReadWriteOnce");
}

/* --- topology helpers ---------------------------------------------------------------- */

static void test_add_topology(void **state) {
        /* in_tree_volume_test.go TestAddTopology */
        char *ws[] = { " ", "\n", "\t", "  ", NULL };
        char *with_ws[] = { " ", "us-central1-a", NULL };
        char *unsorted[] = { "us-central1-f", "us-central1-a", "us-central1-c", "us-central1-b", NULL };
        K8sPersistentVolume pv = {};

        /* "empty zones", "only whitespace-named zones" */
        assert_int_equal(migration_topology_add(&pv, "topology.gke.io/zone", NULL), -EINVAL);
        assert_int_equal(migration_topology_add(&pv, "topology.gke.io/zone", ws), -EINVAL);
        assert_int_equal(pv.n_node_affinity, 0);
        /* "including whitespace-named zones" */
        assert_int_equal(migration_topology_add(&pv, "topology.gke.io/zone", with_ws), 0);
        assert_int_equal(pv.n_node_affinity, 1);
        assert_expression(&pv, 0, 0, "topology.gke.io/zone", "us-central1-a");
        k8s_node_selector_terms_free_for_test(&pv);
        /* "unsorted zones" */
        assert_int_equal(migration_topology_add(&pv, "topology.gke.io/zone", unsorted), 0);
        assert_expression(&pv, 0, 0, "topology.gke.io/zone", "us-central1-a,us-central1-b,us-central1-c,us-central1-f");
        k8s_node_selector_terms_free_for_test(&pv);
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

static void test_csinode_update(void **state) {
        /* nodeinfomanager.go setMigrationAnnotation, on a CSINode object */
        static const struct {
                const char *name, *annotations, *drivers, *expected; /* expected NULL: no key */
                int changed;
        } cases[] = {
                { "created with two migrated drivers", NULL,
                  "{\"name\":\"pd.csi.storage.gke.io\"},{\"name\":\"d.example.com\"},{\"name\":\"ebs.csi.aws.com\"}",
                  "kubernetes.io/aws-ebs,kubernetes.io/gce-pd", 1 },
                { "the same set in another order is no change",
                  "{\"storage.alpha.kubernetes.io/migrated-plugins\":\"kubernetes.io/gce-pd,kubernetes.io/aws-ebs\"}",
                  "{\"name\":\"ebs.csi.aws.com\"},{\"name\":\"pd.csi.storage.gke.io\"}",
                  "kubernetes.io/gce-pd,kubernetes.io/aws-ebs", 0 },
                { "a driver gone", "{\"storage.alpha.kubernetes.io/migrated-plugins\":\"kubernetes.io/aws-ebs,kubernetes.io/gce-pd\",\"x\":\"y\"}",
                  "{\"name\":\"ebs.csi.aws.com\"}", "kubernetes.io/aws-ebs", 1 },
                { "none left: the key goes", "{\"storage.alpha.kubernetes.io/migrated-plugins\":\"kubernetes.io/aws-ebs\"}",
                  "{\"name\":\"d.example.com\"}", NULL, 1 },
                { "an empty value goes too", "{\"storage.alpha.kubernetes.io/migrated-plugins\":\"\"}", "", NULL, 1 },
                { "none and no key: no change", "{}", "{\"name\":\"d.example.com\"}", NULL, 0 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char text[1024];
                print_message("# %s\n", cases[i].name);
                snprintf(text, sizeof text, "{\"metadata\":{\"name\":\"n\"%s%s},\"spec\":{\"drivers\":[%s]}}",
                         cases[i].annotations ? ",\"annotations\":" : "", cases[i].annotations ?: "", cases[i].drivers);
                _cleanup_(cJSON_Deletep) cJSON *j = cJSON_Parse(text);
                assert_non_null(j);
                assert_int_equal(k8s_csinode_update_migrated_plugins(j), cases[i].changed);
                const cJSON *ann = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metadata"), "annotations");
                const cJSON *v = cJSON_GetObjectItem(ann, K8S_MIGRATED_PLUGINS_ANNOTATION);
                if (!cases[i].expected)
                        assert_null(v);
                else
                        assert_string_equal(cJSON_GetStringValue(v), cases[i].expected);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ebs_handles),
                cmocka_unit_test(test_ebs_inline),
                cmocka_unit_test(test_ebs_fields_and_topology),
                cmocka_unit_test(test_copied_fields),
                cmocka_unit_test(test_not_in_tree),
                cmocka_unit_test(test_gce_pd_handles),
                cmocka_unit_test(test_gce_pd_region_errors),
                cmocka_unit_test(test_gce_pd_topology),
                cmocka_unit_test(test_gce_pd_access_modes),
                cmocka_unit_test(test_gce_pd_inline),
                cmocka_unit_test(test_azure_disk),
                cmocka_unit_test(test_azure_file_pv),
                cmocka_unit_test(test_azure_file_account),
                cmocka_unit_test(test_cinder),
                cmocka_unit_test(test_vsphere),
                cmocka_unit_test(test_portworx),
                cmocka_unit_test(test_add_topology),
                cmocka_unit_test(test_plugin_names),
                cmocka_unit_test(test_annotation),
                cmocka_unit_test(test_csinode_update),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
