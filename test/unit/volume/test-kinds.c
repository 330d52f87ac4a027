/* SPDX-License-Identifier: Apache-2.0 */
/* The volume-kind interface (volume/kind.h) with a kind that is not CSI:
 * "scratch", defined here for the tests only.  It claims pod volumes and
 * PVs whose names start with "scratch" (the decoder keeps no other source
 * yet), keeps its own source data in the spec, and has no stage, no driver,
 * no handle.  Through the table, desired_pod_build() gives its volumes to
 * it and nothing CSI-shaped is asked of it; the operation frame runs its
 * steps; the lookups by name, plugin name and pod dir find it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "test/unit/volume/decode.h"
#include "volume/internal.h"
#include "volume/kind.h"
#include "volume/passes/operation.h"
#include "volume/state/desired.h"

#define UID "0b6f1a2c-3d4e-4f50-8a9b-0c1d2e3f4a5b"

static unsigned copies, frees, runs;

extern const VolumeKind volume_kind_scratch_for_tests;

static bool scratch_claims(const K8sPodVolume *v) {
        return !v->csi && !v->claim_name && !v->ephemeral && strncmp(v->name, "scratch", 7) == 0;
}

static bool scratch_claims_pv(const K8sPersistentVolume *pv) {
        return !pv->csi && strncmp(pv->meta.name, "scratch", 7) == 0;
}

static int scratch_spec(const K8sPod *pod, const char *name, VolumeLifecycle lifecycle, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = &volume_kind_scratch_for_tests;
        s->lifecycle = lifecycle;
        if (!(s->spec_name = strdup(name)) || !(s->source = strdup("scratch payload")) ||
            asprintf(&s->unique_name, "kubernetes.io/scratch/%s-%s", pod->meta.uid, name) < 0)
                return -ENOMEM;
        dv->spec = TAKE_PTR(s);
        return 0;
}

static int scratch_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block, DesiredVolume *dv) {
        if (block)
                return desired_set_text(&dv->failed, "scratch volume \"%s\" is a file system only", v->name);
        return scratch_spec(pod, v->name, VOLUME_EPHEMERAL, dv);
}

static int scratch_desire_pv(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv, const ClusterView *view, bool block,
                             DesiredVolume *dv) {
        return scratch_spec(pod, pv->meta.name, VOLUME_PERSISTENT, dv);
}

static void *scratch_source_copy(const void *source) {
        copies++;
        return strdup(source);
}

static void scratch_source_free(void *source) {
        frees++;
        free(source);
}

/* One step, then done: the frame records the outcome. */
static void scratch_run(Operation *op) {
        runs++;
        if (op->step == 0) {
                operation_next(op);
                return;
        }
        /* Stop here: finishing needs a whole manager. */
}

static void scratch_reconstruct_publish(VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                                        const char *spec_name) {
}

/* Every entry the interface lets a kind leave NULL is NULL. */
const VolumeKind volume_kind_scratch_for_tests = {
        .name = "scratch",
        .plugin_name = "kubernetes.io/scratch",
        .pod_dir = "kubernetes.io~scratch",
        .claims = scratch_claims,
        .claims_pv = scratch_claims_pv,
        .desire = scratch_desire,
        .desire_pv = scratch_desire_pv,
        .source_copy = scratch_source_copy,
        .source_free = scratch_source_free,
        .run = scratch_run,
        .reconstruct_publish = scratch_reconstruct_publish,
};

static const VolumeKind *const with_scratch[] = { &volume_kind_scratch_for_tests, &volume_kind_csi, NULL };

static const K8sPersistentVolumeClaim *the_pvc;
static const K8sPersistentVolume *the_pv;

static int get_pvc(void *u, const char *ns, const char *name, const K8sPersistentVolumeClaim **ret) {
        *ret = the_pvc;
        return 0;
}

static int get_pv(void *u, const char *name, const K8sPersistentVolume **ret) {
        *ret = the_pv;
        return 0;
}

static K8sPod *scratch_pod(void) {
        return decode(&k8s_kind_pod,
                      "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\"},"
                      "\"spec\":{\"nodeName\":\"node-a\",\"volumes\":["
                      "{\"name\":\"scratch-a\",\"emptyDir\":{}},"
                      "{\"name\":\"inline\",\"csi\":{\"driver\":\"hostpath.csi.k8s.io\"}},"
                      "{\"name\":\"claimed\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}}],"
                      "\"containers\":[{\"name\":\"c\",\"volumeMounts\":["
                      "{\"name\":\"scratch-a\",\"mountPath\":\"/a\"},{\"name\":\"inline\",\"mountPath\":\"/i\"},"
                      "{\"name\":\"claimed\",\"mountPath\":\"/c\"}]}]},"
                      "\"status\":{\"phase\":\"Running\"}}");
}

static void setup_claim(void) {
        the_pvc = decode(&k8s_kind_pvc,
                         "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"claim\"},"
                         "\"spec\":{\"volumeName\":\"scratch-pv\"},\"status\":{\"phase\":\"Bound\"}}");
        the_pv = decode(&k8s_kind_pv,
                        "{\"metadata\":{\"uid\":\"p1\",\"name\":\"scratch-pv\"},"
                        "\"spec\":{\"claimRef\":{\"namespace\":\"ns1\",\"name\":\"claim\",\"uid\":\"c1\"},"
                        "\"hostPath\":{\"path\":\"/x\"}}}");
}

static void teardown_claim(void) {
        k8s_pvc_free((K8sPersistentVolumeClaim *) the_pvc);
        k8s_pv_free((K8sPersistentVolume *) the_pv);
        the_pvc = NULL;
        the_pv = NULL;
}

/* With the built-in list, each source goes to its own kind: the emptyDir
 * to empty-dir, the inline CSI volume to CSI, the hostPath PV to host-path. */
static void test_unclaimed_skipped(void **state) {
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv };
        K8sPod *pod = scratch_pod();
        DesiredPod *p = NULL;

        setup_claim();
        volume_kinds_set_for_tests(NULL);
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_int_equal(p->n_volumes, 3);
        assert_ptr_equal(desired_pod_find_volume(p, "scratch-a")->spec->kind, &volume_kind_empty_dir);
        assert_ptr_equal(desired_pod_find_volume(p, "inline")->spec->kind, &volume_kind_csi);
        assert_ptr_equal(desired_pod_find_volume(p, "claimed")->spec->kind, &volume_kind_host_path);
        desired_pod_free(p);
        k8s_pod_free(pod);
        teardown_claim();
}

/* With the scratch kind listed, its pod volume and its claim's PV are its,
 * with its source data; the CSI volume stays CSI's. */
static void test_kind_desires_through_table(void **state) {
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv };
        K8sPod *pod = scratch_pod();
        DesiredPod *p = NULL;
        const DesiredVolume *dv;
        VolumeSpec *copy;

        setup_claim();
        volume_kinds_set_for_tests(with_scratch);
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_int_equal(p->n_volumes, 3);
        dv = desired_pod_find_volume(p, "scratch-a");
        assert_non_null(dv);
        assert_ptr_equal(dv->spec->kind, &volume_kind_scratch_for_tests);
        assert_string_equal(dv->spec->unique_name, "kubernetes.io/scratch/" UID "-scratch-a");
        assert_string_equal(dv->spec->source, "scratch payload");
        assert_null(dv->spec->driver);
        dv = desired_pod_find_volume(p, "inline");
        assert_ptr_equal(dv->spec->kind, &volume_kind_csi);
        dv = desired_pod_find_volume(p, "claimed");
        assert_ptr_equal(dv->spec->kind, &volume_kind_scratch_for_tests);
        assert_string_equal(dv->spec->spec_name, "scratch-pv");
        assert_int_equal(dv->spec->lifecycle, VOLUME_PERSISTENT);

        /* The spec's source is the kind's to copy and free. */
        copies = frees = 0;
        copy = volume_spec_copy(dv->spec);
        assert_non_null(copy);
        assert_int_equal(copies, 1);
        assert_ptr_not_equal(copy->source, dv->spec->source);
        assert_string_equal(copy->source, "scratch payload");
        volume_spec_free(copy);
        assert_int_equal(frees, 1);
        desired_pod_free(p);
        assert_int_equal(frees, 3);
        k8s_pod_free(pod);
        teardown_claim();
        volume_kinds_set_for_tests(NULL);
}

static void test_lookups(void **state) {
        volume_kinds_set_for_tests(with_scratch);
        assert_ptr_equal(volume_kind_by_name("scratch"), &volume_kind_scratch_for_tests);
        assert_ptr_equal(volume_kind_by_plugin_name("kubernetes.io/scratch"), &volume_kind_scratch_for_tests);
        assert_ptr_equal(volume_kind_by_pod_dir("kubernetes.io~scratch"), &volume_kind_scratch_for_tests);
        assert_ptr_equal(volume_kind_by_pod_dir("kubernetes.io~csi"), &volume_kind_csi);
        assert_null(volume_kind_by_pod_dir("kubernetes.io~nfs"));
        /* Without call names of its own, an operation is called by its kind. */
        assert_string_equal(volume_kind_call_name(&volume_kind_scratch_for_tests, OP_PUBLISH), "publish");
        assert_string_equal(volume_kind_call_name(&volume_kind_csi, OP_PUBLISH), "NodePublishVolume");
        volume_kinds_set_for_tests(NULL);
        assert_null(volume_kind_by_name("scratch"));
        assert_ptr_equal(volume_kind_by_name("csi"), &volume_kind_csi);
}

/* The frame runs the kind's steps, one after another. */
static void test_frame_runs_kind(void **state) {
        VolumeManager m = {};
        ActualVolume av = { .kind = &volume_kind_scratch_for_tests };
        Operation op = { .m = &m, .av = &av, .kind = OP_PUBLISH };

        runs = 0;
        operation_run(&op);
        assert_int_equal(runs, 2);
        assert_int_equal(op.step, 1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_unclaimed_skipped),
                cmocka_unit_test(test_kind_desires_through_table),
                cmocka_unit_test(test_lookups),
                cmocka_unit_test(test_frame_runs_kind),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
