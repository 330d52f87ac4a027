/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "test/unit/volume/decode.h"
#include "volume/state/desired.h"

#define UID "0b6f1a2c-3d4e-4f50-8a9b-0c1d2e3f4a5b"

/* A tiny cluster: the PVCs and PVs a test puts in. */
typedef struct Fake {
        K8sPersistentVolumeClaim *pvcs[4];
        K8sPersistentVolume *pvs[4];
        bool pending; /* lookups not answered yet */
        const K8sKind *refused; /* lookups of this kind answer -EACCES */
        const char *refusal;    /* what the API server said then */
} Fake;

static int get_pvc(void *u, const char *ns, const char *name, const K8sPersistentVolumeClaim **ret) {
        Fake *f = u;
        *ret = NULL;
        if (f->pending)
                return -EAGAIN;
        if (f->refused == &k8s_kind_pvc)
                return -EACCES;
        for (size_t i = 0; i < 4; i++)
                if (f->pvcs[i] && streq(f->pvcs[i]->meta.namespace, ns) && streq(f->pvcs[i]->meta.name, name))
                        *ret = f->pvcs[i];
        return 0;
}

static int get_pv(void *u, const char *name, const K8sPersistentVolume **ret) {
        Fake *f = u;
        *ret = NULL;
        if (f->refused == &k8s_kind_pv)
                return -EACCES;
        for (size_t i = 0; i < 4; i++)
                if (f->pvs[i] && streq(f->pvs[i]->meta.name, name))
                        *ret = f->pvs[i];
        return 0;
}

static const char *lookup_error(void *u, const K8sKind *kind, const char *ns, const char *name) {
        Fake *f = u;
        return kind == f->refused ? f->refusal : NULL;
}

static void fake_free(Fake *f) {
        for (size_t i = 0; i < 4; i++) {
                k8s_pvc_free(f->pvcs[i]);
                k8s_pv_free(f->pvs[i]);
        }
}

static K8sPod *pod_with(const char *volumes, const char *mounts, const char *devices) {
        char json[4096];
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\","
                 "\"resourceVersion\":\"5\"},"
                 "\"spec\":{\"nodeName\":\"node-a\",\"serviceAccountName\":\"sa\","
                 "\"securityContext\":{\"fsGroup\":2000},"
                 "\"volumes\":[%s],"
                 "\"containers\":[{\"name\":\"c\",\"volumeMounts\":[%s],\"volumeDevices\":[%s]}]},"
                 "\"status\":{\"phase\":\"Running\"}}",
                 volumes, mounts, devices);
        return decode(&k8s_kind_pod, json);
}

#define PVC(name, volume) \
        "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"" name "\",\"resourceVersion\":\"1\"}," \
        "\"spec\":{\"volumeName\":\"" volume "\"},\"status\":{\"phase\":\"Bound\"}}"
/* The claimRef the PV controller writes when it binds the PV to claim "c1". */
#define REF_C1 "\"claimRef\":{\"namespace\":\"ns1\",\"name\":\"claim\",\"uid\":\"c1\"},"
#define PV_CSI(name, extra) PV_CSI_REF(name, REF_C1, extra)
#define PV_CSI_REF(name, ref, extra) \
        "{\"metadata\":{\"uid\":\"p1\",\"name\":\"" name "\",\"resourceVersion\":\"1\"}," \
        "\"spec\":{" ref "\"csi\":{\"driver\":\"hostpath.csi.k8s.io\",\"volumeHandle\":\"vol-1\",\"fsType\":\"ext4\"," \
        "\"volumeAttributes\":{\"k\":\"v\"},\"nodeStageSecretRef\":{\"name\":\"st\",\"namespace\":\"sec\"}," \
        "\"nodePublishSecretRef\":{\"name\":\"pu\",\"namespace\":\"sec\"}}," \
        "\"accessModes\":[\"ReadWriteMany\"],\"mountOptions\":[\"noatime\",\"ro\"]" extra "}}"

static void test_inline_volume(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with("{\"name\":\"scratch\",\"csi\":{\"driver\":\"inline.example.com\",\"readOnly\":true,"
                               "\"fsType\":\"xfs\",\"volumeAttributes\":{\"size\":\"1Gi\"},"
                               "\"nodePublishSecretRef\":{\"name\":\"creds\"}}},"
                               "{\"name\":\"unused\",\"csi\":{\"driver\":\"inline.example.com\"}}",
                               "{\"name\":\"scratch\",\"mountPath\":\"/data\"}", "");
        DesiredPod *p = NULL;

        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_string_equal(p->key, "ns1/web");
        assert_true(p->has_fs_group);
        assert_int_equal(p->fs_group, 2000);
        assert_string_equal(p->service_account, "sa");
        assert_int_equal(p->n_volumes, 1); /* "unused" is in no container */
        const DesiredVolume *v = desired_pod_find_volume(p, "scratch");
        assert_non_null(v->spec);
        assert_int_equal(v->spec->lifecycle, VOLUME_EPHEMERAL);
        /* "csi-" + sha256(podUID + volume name), computed with Python's hashlib. */
        assert_string_equal(v->spec->handle, "csi-775e2986faf8b06903da9456631ecb2da4cfe5dbd5643cb67c358dc5dc4cf77d");
        assert_string_equal(v->spec->unique_name, "kubernetes.io/csi/" UID "-scratch");
        assert_string_equal(v->spec->spec_name, "scratch");
        assert_string_equal(v->spec->fs_type, "xfs");
        assert_true(v->spec->read_only);
        assert_string_equal(v->spec->access_mode, "ReadWriteOnce");
        assert_string_equal(k8s_string_map_get(&v->spec->attributes, "size"), "1Gi");
        /* The publish secret of an inline volume lives in the pod's namespace. */
        assert_string_equal(v->spec->publish_secret.namespace, "ns1");
        assert_string_equal(v->spec->publish_secret.name, "creds");
        assert_null(v->spec->stage_secret.name);
        desired_pod_free(p);
        k8s_pod_free(pod);
}

static void test_pvc_waits_then_resolves(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with("{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\",\"readOnly\":true}}",
                               "{\"name\":\"data\",\"mountPath\":\"/data\"}", "");
        DesiredPod *p = NULL;

        f.pending = true;
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        assert_true(p->volumes[0].looking_up);
        assert_string_equal(p->volumes[0].waiting, "looking up persistentvolumeclaim \"claim\"");
        desired_pod_free(p);
        f.pending = false;

        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        assert_false(p->volumes[0].looking_up);
        assert_string_equal(p->volumes[0].waiting, "persistentvolumeclaim \"claim\" not found");
        desired_pod_free(p);

        f.pvcs[0] = decode(&k8s_kind_pvc, "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"claim\","
                                          "\"resourceVersion\":\"1\"},\"spec\":{},\"status\":{\"phase\":\"Pending\"}}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_string_equal(p->volumes[0].waiting, "error processing PVC ns1/claim: PVC is not bound");
        desired_pod_free(p);
        k8s_pvc_free(f.pvcs[0]);

        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-1"));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_string_equal(p->volumes[0].waiting, "persistentvolume \"pv-1\" of claim \"claim\" not found");
        desired_pod_free(p);

        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI("pv-1", ""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        const VolumeSpec *s = p->volumes[0].spec;
        assert_non_null(s);
        assert_null(p->volumes[0].waiting);
        assert_int_equal(s->lifecycle, VOLUME_PERSISTENT);
        assert_false(s->block);
        assert_string_equal(s->spec_name, "pv-1");
        assert_string_equal(s->handle, "vol-1");
        assert_string_equal(s->unique_name, "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1");
        assert_string_equal(s->access_mode, "ReadWriteMany");
        assert_true(s->read_only); /* from the pod's claim */
        assert_string_equal(s->mount_flags[0], "noatime");
        assert_string_equal(s->mount_flags[1], "ro");
        assert_null(s->mount_flags[2]);
        assert_string_equal(s->stage_secret.namespace, "sec");
        assert_string_equal(s->stage_secret.name, "st");
        assert_string_equal(s->publish_secret.name, "pu");
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

static void test_generic_ephemeral_and_non_csi(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with("{\"name\":\"eph\",\"ephemeral\":{\"volumeClaimTemplate\":{\"spec\":{}}}},"
                               "{\"name\":\"nfs\",\"persistentVolumeClaim\":{\"claimName\":\"nfs-claim\"}},"
                               "{\"name\":\"cfg\",\"configMap\":{\"name\":\"x\"}}",
                               "{\"name\":\"eph\",\"mountPath\":\"/e\"},{\"name\":\"nfs\",\"mountPath\":\"/n\"},"
                               "{\"name\":\"cfg\",\"mountPath\":\"/c\"}",
                               "");
        DesiredPod *p = NULL;

        /* A claim named like the pod's generic ephemeral volume that the pod
         * does not control is refused (anyone may have made it)... */
        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("web-eph", "pv-1"));
        f.pvcs[1] = decode(&k8s_kind_pvc, PVC("nfs-claim", "pv-nfs"));
        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI("pv-1", ""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        assert_string_equal(p->volumes[0].failed,
                            "persistentvolumeclaim ns1/web-eph was not created for pod ns1/web (pod is not owner)");
        desired_pod_free(p);
        k8s_pvc_free(f.pvcs[0]);
        /* ... and so is one controlled by another pod. */
        f.pvcs[0] = decode(&k8s_kind_pvc, "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"web-eph\","
                                          "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"web\","
                                          "\"uid\":\"another\",\"controller\":true}]},"
                                          "\"spec\":{\"volumeName\":\"pv-1\"},\"status\":{\"phase\":\"Bound\"}}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        desired_pod_free(p);
        k8s_pvc_free(f.pvcs[0]);
        f.pvcs[0] = decode(&k8s_kind_pvc, "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"web-eph\","
                                          "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"web\","
                                          "\"uid\":\"" UID "\",\"controller\":true,\"blockOwnerDeletion\":true}]},"
                                          "\"spec\":{\"volumeName\":\"pv-1\"},\"status\":{\"phase\":\"Bound\"}}");
        f.pvs[1] = decode(&k8s_kind_pv, "{\"metadata\":{\"uid\":\"p2\",\"name\":\"pv-nfs\",\"resourceVersion\":\"1\"},"
                                        "\"spec\":{" REF_C1 "\"nfs\":{\"server\":\"s\",\"path\":\"/\"}}}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        /* The generic ephemeral volume's claim is "<pod>-<volume>"; an NFS PV
         * is a final error, never left out in silence; the configMap is the
         * configmap kind's, which waits while this view cannot look it up. */
        assert_int_equal(p->n_volumes, 3);
        assert_string_equal(p->volumes[0].name, "eph");
        assert_string_equal(p->volumes[0].spec->spec_name, "pv-1");
        assert_string_equal(p->volumes[1].name, "nfs");
        assert_null(p->volumes[1].spec);
        assert_string_equal(p->volumes[1].failed,
                            "unsupported volume type nfs (persistentvolume \"pv-nfs\"): kvolumed does not set up nfs "
                            "volumes; use a CSI driver, or set it up in the pod runner and name nfs in [volumes] "
                            "runner-kinds");
        assert_string_equal(p->volumes[2].name, "cfg");
        assert_null(p->volumes[2].spec);
        assert_true(p->volumes[2].looking_up);
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

/* [volumes] runner-kinds: a pod's nfs volume and a claim's nfs PV are the
 * runner's, listed apart and never desired; an image volume not named there
 * is a final error; a volume or a mount the API would refuse is one too. */
static void test_runner_kinds_and_validation(void **state) {
        Fake f = {};
        char *runner[] = { (char *) "nfs", NULL };
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error,
                             .runner_kinds = runner };
        K8sPod *pod = pod_with("{\"name\":\"share\",\"nfs\":{\"server\":\"s\",\"path\":\"/\"}},"
                               "{\"name\":\"claimed\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}},"
                               "{\"name\":\"img\",\"image\":{\"reference\":\"busybox\"}},"
                               "{\"name\":\"two\",\"csi\":{\"driver\":\"d\"},\"emptyDir\":{}},"
                               "{\"name\":\"bidi\",\"csi\":{\"driver\":\"hostpath.csi.k8s.io\"}},"
                               "{\"name\":\"unused\",\"gitRepo\":{\"repository\":\"r\"}}",
                               "{\"name\":\"share\",\"mountPath\":\"/s\"},{\"name\":\"claimed\",\"mountPath\":\"/c\"},"
                               "{\"name\":\"img\",\"mountPath\":\"/i\"},{\"name\":\"two\",\"mountPath\":\"/t\"},"
                               "{\"name\":\"bidi\",\"mountPath\":\"/b\",\"mountPropagation\":\"Bidirectional\"}",
                               "");
        DesiredPod *p = NULL;

        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-nfs"));
        f.pvs[0] = decode(&k8s_kind_pv, "{\"metadata\":{\"uid\":\"p2\",\"name\":\"pv-nfs\",\"resourceVersion\":\"1\"},"
                                        "\"spec\":{" REF_C1 "\"nfs\":{\"server\":\"s\",\"path\":\"/\"}}}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_int_equal(p->n_runner_volumes, 2);
        assert_string_equal(p->runner_volumes[0].name, "share");
        assert_string_equal(p->runner_volumes[0].type, "nfs");
        assert_string_equal(p->runner_volumes[1].name, "claimed");
        assert_string_equal(p->runner_volumes[1].type, "nfs");
        assert_int_equal(p->n_volumes, 3); /* the unused gitRepo is not looked at, as kubelet */
        assert_string_equal(desired_pod_find_volume(p, "img")->failed,
                            "unsupported volume type image: kvolumed does not set up image volumes; use a CSI "
                            "driver, or set it up in the pod runner and name image in [volumes] runner-kinds");
        assert_string_equal(desired_pod_find_volume(p, "two")->failed,
                            "volume \"two\" is invalid: more than one volume source");
        assert_string_equal(desired_pod_find_volume(p, "bidi")->failed,
                            "volumeMount /b of volume \"bidi\" in container \"c\" is invalid: Bidirectional mount "
                            "propagation is available only to privileged containers");
        desired_pod_free(p);
        /* Without runner-kinds both nfs volumes are final errors. */
        view.runner_kinds = NULL;
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_int_equal(p->n_runner_volumes, 0);
        assert_non_null(strstr(desired_pod_find_volume(p, "share")->failed, "unsupported volume type nfs:"));
        assert_non_null(strstr(desired_pod_find_volume(p, "claimed")->failed,
                               "unsupported volume type nfs (persistentvolume \"pv-nfs\")"));
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

static void test_mode_mismatch_and_other_claim(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with("{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}}", "",
                               "{\"name\":\"data\",\"devicePath\":\"/dev/xvda\"}");
        DesiredPod *p = NULL;

        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-1"));
        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI("pv-1", ""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        assert_string_equal(p->volumes[0].failed, "volume \"data\" has volumeMode Filesystem but is used in volumeDevices");
        desired_pod_free(p);
        k8s_pv_free(f.pvs[0]);

        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI("pv-1", ",\"volumeMode\":\"Block\""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_non_null(p->volumes[0].spec);
        assert_true(p->volumes[0].spec->block);
        desired_pod_free(p);
        k8s_pv_free(f.pvs[0]);

        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI_REF("pv-1", "\"claimRef\":{\"namespace\":\"ns1\",\"name\":\"claim\","
                                                           "\"uid\":\"someone-else\"},", ",\"volumeMode\":\"Block\""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_string_equal(p->volumes[0].waiting, "error processing PVC ns1/claim: found PV object pv-1 but its "
                            "pv.Spec.ClaimRef.UID someone-else does not point to claim.UID c1");
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

/* A lookup the API server refuses (the Node authorizer's graph does not
 * have the pod yet, or never will): the volume waits with the server's words,
 * to be reported in an Event, and is not failed for good. */
static void test_refused_lookup_waits_with_server_message(void **state) {
        Fake f = { .refused = &k8s_kind_pvc,
                   .refusal = "persistentvolumeclaims \"claim\" is forbidden: User \"system:node:node-a\" cannot "
                              "get resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"ns1\": "
                              "no relationship found between node 'node-a' and this object" };
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with("{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}}",
                               "{\"name\":\"data\",\"mountPath\":\"/data\"}", "");
        DesiredPod *p = NULL;

        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_int_equal(p->n_volumes, 1);
        assert_null(p->volumes[0].spec);
        assert_null(p->volumes[0].failed);
        assert_false(p->volumes[0].looking_up); /* reported, unlike a lookup in progress */
        assert_string_equal(p->volumes[0].waiting, f.refusal);
        desired_pod_free(p);

        /* No message to give: the refusal is still named. */
        view.lookup_error = NULL;
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].failed);
        assert_false(p->volumes[0].looking_up);
        assert_string_equal(p->volumes[0].waiting, "persistentvolumeclaims \"claim\" is forbidden");
        desired_pod_free(p);

        /* The claim is allowed, its PV is refused. */
        f.refused = &k8s_kind_pv;
        f.refusal = "persistentvolumes \"pv-1\" is forbidden: no relationship found";
        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-1"));
        view.lookup_error = lookup_error;
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        assert_null(p->volumes[0].failed);
        assert_false(p->volumes[0].looking_up);
        assert_string_equal(p->volumes[0].waiting, f.refusal);
        desired_pod_free(p);

        /* Allowed at last: the volume resolves. */
        f.refused = NULL;
        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI("pv-1", ""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_non_null(p->volumes[0].spec);
        assert_null(p->volumes[0].waiting);
        desired_pod_free(p);
        fake_free(&f);
        k8s_pod_free(pod);
}

static void test_malicious_names_refused(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        const char *field = NULL;
        DesiredPod *p = NULL;
        K8sPod *pod = pod_with("{\"name\":\"../../etc\",\"csi\":{\"driver\":\"d.example\"}}",
                               "{\"name\":\"../../etc\",\"mountPath\":\"/x\"}", "");

        assert_int_equal(desired_pod_build(pod, &view, &p, &field), -EINVAL);
        assert_null(p);
        assert_string_equal(field, "spec.volumes[].name");
        k8s_pod_free(pod);

        /* A PV name that would be a path escape, via a PVC. */
        pod = pod_with("{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}}",
                       "{\"name\":\"data\",\"mountPath\":\"/data\"}", "");
        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", ".."));
        f.pvs[0] = decode(&k8s_kind_pv, PV_CSI("..", ""));
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_null(p->volumes[0].spec);
        assert_string_equal(p->volumes[0].failed, "persistentvolume name \"..\" cannot be used as a path");
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

static K8sPod *pod_with_security(const char *security_context) {
        char json[2048];
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\"},"
                 "\"spec\":{\"securityContext\":%s,\"volumes\":[{\"name\":\"data\",\"persistentVolumeClaim\":"
                 "{\"claimName\":\"claim\"}}],\"containers\":[{\"name\":\"c\",\"volumeMounts\":[{\"name\":"
                 "\"data\",\"mountPath\":\"/d\"}]}]}}",
                 security_context);
        return decode(&k8s_kind_pod, json);
}

static char *label_of(const char *security_context) {
        K8sPod *pod = pod_with_security(security_context);
        char *label = NULL;
        assert_int_equal(desired_selinux_label(pod, &label), 0);
        k8s_pod_free(pod);
        return label;
}

static void test_selinux_label(void **state) {
        char *l;

        /* The runtime's file label: the pod's user and level, object_r and container_file_t. */
        l = label_of("{\"seLinuxOptions\":{\"level\":\"s0:c1,c2\"}}");
        assert_string_equal(l, "system_u:object_r:container_file_t:s0:c1,c2");
        free(l);
        l = label_of("{\"seLinuxOptions\":{\"user\":\"staff_u\",\"role\":\"staff_r\",\"type\":\"spc_t\","
                     "\"level\":\"s0-s0:c0.c1023\"}}");
        assert_string_equal(l, "staff_u:object_r:container_file_t:s0-s0:c0.c1023");
        free(l);
        /* No level: the runtime picks one kubelet cannot know. */
        assert_null(label_of("{\"seLinuxOptions\":{\"user\":\"staff_u\"}}"));
        assert_null(label_of("{}"));
        /* Nothing that could end the quoted mount option. */
        assert_null(label_of("{\"seLinuxOptions\":{\"level\":\"s0\\\",nosuid\"}}"));
        assert_null(label_of("{\"seLinuxOptions\":{\"user\":\"a b\",\"level\":\"s0\"}}"));
}

/* kubelet's supportsFSGroup: ReadWriteOnce anywhere in the PV's modes; a PV
 * without modes gets no fsGroup (its CSI access mode still defaults to RWO). */
static void test_fs_group_rule(void **state) {
        static const struct {
                const char *modes; /* JSON, or NULL: no accessModes */
                const char *policy;
                bool applies;
        } cases[] = {
                { "[\"ReadWriteOnce\"]", NULL, true },
                { "[\"ReadOnlyMany\",\"ReadWriteOnce\"]", NULL, true },
                { "[\"ReadOnlyMany\",\"ReadWriteOnce\"]", "ReadWriteOnceWithFSType", true },
                { "[\"ReadWriteMany\"]", NULL, false },
                { "[\"ReadWriteOncePod\"]", NULL, false },
                { NULL, NULL, false },
                { NULL, "File", true },
                { "[\"ReadWriteOnce\"]", "None", false },
        };
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with("{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}}",
                               "{\"name\":\"data\",\"mountPath\":\"/data\"}", "");

        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-1"));
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char json[1024];
                DesiredPod *p = NULL;

                snprintf(json, sizeof json,
                         "{\"metadata\":{\"uid\":\"p1\",\"name\":\"pv-1\",\"resourceVersion\":\"1\"},"
                         "\"spec\":{" REF_C1 "\"csi\":{\"driver\":\"d.example.com\",\"volumeHandle\":\"h\","
                         "\"fsType\":\"ext4\"}%s%s}}",
                         cases[i].modes ? ",\"accessModes\":" : "", cases[i].modes ?: "");
                f.pvs[0] = decode(&k8s_kind_pv, json);
                assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
                VolumeSpec *s = p->volumes[0].spec;
                assert_non_null(s);
                if (cases[i].applies != volume_spec_fs_group_applies(s, cases[i].policy, true))
                        fail_msg("case %zu: modes %s policy %s", i, cases[i].modes ?: "none",
                                 cases[i].policy ?: "default");
                /* The CSI access mode is another rule: RWO when there are none. */
                if (!cases[i].modes)
                        assert_string_equal(s->access_mode, "ReadWriteOnce");
                VolumeSpec *copy = volume_spec_copy(s);
                assert_true(volume_spec_fs_group_applies(copy, cases[i].policy, true) == cases[i].applies);
                assert_false(volume_spec_fs_group_applies(copy, cases[i].policy, false));
                volume_spec_free(copy);
                s->read_only = true;
                assert_false(volume_spec_fs_group_applies(s, cases[i].policy, true));
                desired_pod_free(p);
                k8s_pv_free(f.pvs[0]);
                f.pvs[0] = NULL;
        }
        fake_free(&f);
        k8s_pod_free(pod);
}

/* kubelet's GetPodVolumeNames + GetMountSELinuxLabel: the effective options
 * of the containers that mount the volume, a container's over the pod's. */
static void test_volume_selinux_label_from_containers(void **state) {
        K8sPod *pod = decode(&k8s_kind_pod,
                "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\"},"
                "\"spec\":{\"securityContext\":{\"seLinuxOptions\":{\"level\":\"s0:c1,c2\"}},"
                "\"volumes\":[{\"name\":\"a\"},{\"name\":\"b\"},{\"name\":\"c\"},{\"name\":\"d\"}],"
                "\"ephemeralContainers\":[{\"name\":\"debug\",\"volumeMounts\":[{\"name\":\"d\","
                "\"mountPath\":\"/d\"}],\"securityContext\":{\"seLinuxOptions\":{\"level\":\"s0:c9\"}}}],"
                "\"initContainers\":[{\"name\":\"i\",\"volumeMounts\":[{\"name\":\"c\",\"mountPath\":\"/c\"}]}],"
                "\"containers\":[{\"name\":\"x\",\"volumeMounts\":[{\"name\":\"a\",\"mountPath\":\"/a\"},"
                "{\"name\":\"b\",\"mountPath\":\"/b\"}],\"securityContext\":{\"seLinuxOptions\":"
                "{\"user\":\"staff_u\",\"level\":\"s0:c3,c4\"}}},"
                "{\"name\":\"y\",\"volumeMounts\":[{\"name\":\"b\",\"mountPath\":\"/b\"},"
                "{\"name\":\"c\",\"mountPath\":\"/c\"}]}]}}");
        char *label = NULL, *conflict = NULL;

        /* a: only container x, whose options replace the pod's whole. */
        assert_int_equal(desired_volume_selinux_label(pod, "a", &label, &conflict), 0);
        assert_string_equal(label, "staff_u:object_r:container_file_t:s0:c3,c4");
        assert_null(conflict);
        free(label);
        /* b: x and y (the pod's options) disagree. */
        assert_int_equal(desired_volume_selinux_label(pod, "b", &label, &conflict), 0);
        assert_string_equal(label, "staff_u:object_r:container_file_t:s0:c3,c4");
        assert_string_equal(conflict, "system_u:object_r:container_file_t:s0:c1,c2");
        free(label);
        free(conflict);
        /* c: the init container and y, both with the pod's options. */
        assert_int_equal(desired_volume_selinux_label(pod, "c", &label, &conflict), 0);
        assert_string_equal(label, "system_u:object_r:container_file_t:s0:c1,c2");
        assert_null(conflict);
        free(label);
        /* d: only the ephemeral (kubectl debug) container mounts it. */
        assert_int_equal(desired_volume_selinux_label(pod, "d", &label, &conflict), 0);
        assert_string_equal(label, "system_u:object_r:container_file_t:s0:c9");
        assert_null(conflict);
        free(label);
        /* A volume no container mounts has no label. */
        assert_int_equal(desired_volume_selinux_label(pod, "none", &label, &conflict), 0);
        assert_null(label);
        assert_null(conflict);
        k8s_pod_free(pod);
}

static void test_selinux_context_and_rwop(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with_security("{\"seLinuxOptions\":{\"level\":\"s0:c1,c2\"},"
                                        "\"seLinuxChangePolicy\":\"MountOption\"}");
        DesiredPod *p = NULL;
        const char *label = "system_u:object_r:container_file_t:s0:c1,c2";

        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-1"));
        f.pvs[0] = decode(&k8s_kind_pv, "{\"metadata\":{\"uid\":\"p1\",\"name\":\"pv-1\",\"resourceVersion\":\"1\"},\"spec\":{" REF_C1 "\"csi\":{\"driver\":"
                                        "\"d.example.com\",\"volumeHandle\":\"h\"},\"accessModes\":"
                                        "[\"ReadWriteOncePod\"]}}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        VolumeSpec *s = p->volumes[0].spec;
        assert_non_null(s);
        assert_true(s->rwop);
        assert_string_equal(s->selinux_label, label);
        assert_string_equal(s->selinux_change_policy, "MountOption");
        VolumeSpec *copy = volume_spec_copy(s);
        assert_true(copy->rwop);
        assert_string_equal(copy->selinux_label, label);
        volume_spec_free(copy);

        assert_string_equal(volume_spec_selinux_context(s, true, true, false), label);
        assert_null(volume_spec_selinux_context(s, false, true, false)); /* no SELinux on the host */
        assert_null(volume_spec_selinux_context(s, true, false, false)); /* driver without seLinuxMount */
        free(s->selinux_change_policy);
        s->selinux_change_policy = strdup("Recursive");
        assert_null(volume_spec_selinux_context(s, true, true, true));
        /* Not RWOP: only with the switch, and only for MountOption. */
        s->rwop = false;
        assert_null(volume_spec_selinux_context(s, true, true, true));
        free(s->selinux_change_policy);
        s->selinux_change_policy = NULL;
        assert_null(volume_spec_selinux_context(s, true, true, true));
        s->selinux_change_policy = strdup("MountOption");
        assert_null(volume_spec_selinux_context(s, true, true, false));
        assert_string_equal(volume_spec_selinux_context(s, true, true, true), label);
        s->block = true; /* a device is not mounted */
        assert_null(volume_spec_selinux_context(s, true, true, true));
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);

        /* More than one mode: not RWOP (kubelet cannot tell which one the pod means). */
        f = (Fake){};
        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-1"));
        f.pvs[0] = decode(&k8s_kind_pv, "{\"metadata\":{\"uid\":\"p1\",\"name\":\"pv-1\",\"resourceVersion\":\"1\"},\"spec\":{" REF_C1 "\"csi\":{\"driver\":"
                                        "\"d.example.com\",\"volumeHandle\":\"h\"},\"accessModes\":"
                                        "[\"ReadWriteOnce\",\"ReadWriteOncePod\"]}}");
        pod = pod_with_security("{}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_false(p->volumes[0].spec->rwop);
        assert_null(p->volumes[0].spec->selinux_label);
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

/* kubelet's getPVCExtractPV and getPVSpec: only a Bound claim, and only the
 * PV whose claimRef.uid is that claim's, whatever spec.volumeName says (any
 * user may write it to name another tenant's PV).  Each is a wait with
 * kubelet's words: binding may be in progress. */
static void test_claim_binding_checked(void **state) {
        static const struct {
                const char *pvc, *pv, *waiting;
        } cases[] = {
                /* Pre-bound by its user, not bound yet: never the PV it names. */
                { "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"claim\"},"
                  "\"spec\":{\"volumeName\":\"pv-1\"},\"status\":{\"phase\":\"Pending\"}}",
                  PV_CSI_REF("pv-1", "\"claimRef\":{\"namespace\":\"other\",\"name\":\"theirs\"},", ""),
                  "error processing PVC ns1/claim: PVC is not bound" },
                { "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"claim\"},"
                  "\"spec\":{\"volumeName\":\"pv-1\"}}",
                  PV_CSI("pv-1", ""), "error processing PVC ns1/claim: PVC is not bound" },
                { "{\"metadata\":{\"uid\":\"c1\",\"namespace\":\"ns1\",\"name\":\"claim\"},"
                  "\"spec\":{},\"status\":{\"phase\":\"Bound\"}}",
                  PV_CSI("pv-1", ""), "error processing PVC ns1/claim: PVC has empty pvc.Spec.VolumeName" },
                /* Reserved for another namespace's claim, its uid not written yet. */
                { PVC("claim", "pv-1"),
                  PV_CSI_REF("pv-1", "\"claimRef\":{\"namespace\":\"other\",\"name\":\"theirs\"},", ""),
                  "error processing PVC ns1/claim: found PV object pv-1 but its pv.Spec.ClaimRef.UID  does not "
                  "point to claim.UID c1" },
                /* Bound to another claim of the same name (the first one was deleted). */
                { PVC("claim", "pv-1"),
                  PV_CSI_REF("pv-1", "\"claimRef\":{\"namespace\":\"ns1\",\"name\":\"claim\",\"uid\":\"c0\"},", ""),
                  "error processing PVC ns1/claim: found PV object pv-1 but its pv.Spec.ClaimRef.UID c0 does not "
                  "point to claim.UID c1" },
                /* Available, bound to no claim at all. */
                { PVC("claim", "pv-1"), PV_CSI_REF("pv-1", "", ""),
                  "error processing PVC ns1/claim: found PV object pv-1 but it has a nil pv.Spec.ClaimRef "
                  "indicating it is not yet bound to the claim" },
                { PVC("claim", "pv-1"), PV_CSI("pv-1", ""), NULL },
        };
        K8sPod *pod = pod_with("{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}}",
                               "{\"name\":\"data\",\"mountPath\":\"/data\"}", "");

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Fake f = {};
                ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
                DesiredPod *p = NULL;

                f.pvcs[0] = decode(&k8s_kind_pvc, cases[i].pvc);
                f.pvs[0] = decode(&k8s_kind_pv, cases[i].pv);
                assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
                assert_int_equal(p->n_volumes, 1);
                assert_null(p->volumes[0].failed);
                if (cases[i].waiting) {
                        if (p->volumes[0].spec)
                                fail_msg("case %zu: staged the PV of a claim that is not bound to it", i);
                        assert_string_equal(p->volumes[0].waiting, cases[i].waiting);
                } else {
                        assert_non_null(p->volumes[0].spec);
                        assert_string_equal(p->volumes[0].spec->spec_name, "pv-1");
                }
                desired_pod_free(p);
                fake_free(&f);
        }
        k8s_pod_free(pod);
}

static void test_pod_volumes_wanted(void **state) {
        K8sPod *pod = pod_with("", "", "");
        assert_true(pod_volumes_wanted(pod));
        free(pod->phase);
        pod->phase = strdup("Succeeded");
        assert_false(pod_volumes_wanted(pod));
        free(pod->phase);
        pod->phase = strdup("Running");
        pod->meta.deletion_timestamp = strdup("2026-11-22T01:00:00Z");
        /* Deleted, no container status running: the volumes can go. */
        assert_false(pod_volumes_wanted(pod));
        k8s_pod_free(pod);

        pod = decode(&k8s_kind_pod,
                     "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\",\"resourceVersion\":\"5\","
                     "\"deletionTimestamp\":\"2026-11-22T01:00:00Z\"},\"spec\":{\"containers\":[{\"name\":\"c\"}]},"
                     "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"c\",\"state\":"
                     "{\"running\":{\"startedAt\":\"2026-11-22T00:00:00Z\"}}}]}}");
        assert_true(pod_volumes_wanted(pod)); /* still running: keep */
        k8s_pod_free(pod);
}

/* kubectl debug: the app container is gone, the ephemeral container still
 * runs.  Every kind of container counts for keeping a pod's volumes, also
 * in a phase that says the pod is finished. */
#define POD_STATUSES(deleted, phase, statuses)                                                                     \
        "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\",\"resourceVersion\":\"5\"" deleted "}," \
        "\"spec\":{\"containers\":[{\"name\":\"c\"}],\"initContainers\":[{\"name\":\"i\"}],"                      \
        "\"ephemeralContainers\":[{\"name\":\"debugger\",\"targetContainerName\":\"c\"}]},"                           \
        "\"status\":{\"phase\":\"" phase "\"," statuses "}}"
#define DELETED ",\"deletionTimestamp\":\"2026-11-22T01:00:00Z\""
#define RUNNING(n) "{\"name\":\"" n "\",\"state\":{\"running\":{\"startedAt\":\"2026-11-22T00:00:00Z\"}}}"
#define TERMINATED(n) "{\"name\":\"" n "\",\"state\":{\"terminated\":{\"exitCode\":0}}}"

static void test_pod_volumes_wanted_every_container_kind(void **state) {
        static const struct {
                const char *json;
                bool wanted;
        } cases[] = {
                { POD_STATUSES(DELETED, "Running", "\"containerStatuses\":[" TERMINATED("c") "],"
                               "\"ephemeralContainerStatuses\":[" RUNNING("debugger") "]"), true },
                { POD_STATUSES(DELETED, "Running", "\"containerStatuses\":[" TERMINATED("c") "],"
                               "\"ephemeralContainerStatuses\":[" TERMINATED("debugger") "]"), false },
                { POD_STATUSES(DELETED, "Pending", "\"initContainerStatuses\":[" RUNNING("i") "]"), true },
                /* Finished, but the status still shows one running: keep until none runs. */
                { POD_STATUSES("", "Succeeded", "\"containerStatuses\":[" TERMINATED("c") "],"
                               "\"ephemeralContainerStatuses\":[" RUNNING("debugger") "]"), true },
                { POD_STATUSES("", "Failed", "\"containerStatuses\":[" RUNNING("c") "]"), true },
                { POD_STATUSES(DELETED, "Failed", "\"containerStatuses\":[" RUNNING("c") "]"), true },
                { POD_STATUSES("", "Succeeded", "\"containerStatuses\":[" TERMINATED("c") "],"
                               "\"initContainerStatuses\":[" TERMINATED("i") "],"
                               "\"ephemeralContainerStatuses\":[" TERMINATED("debugger") "]"), false },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                K8sPod *pod = decode(&k8s_kind_pod, cases[i].json);
                if (pod_volumes_wanted(pod) != cases[i].wanted)
                        fail_msg("case %zu: wanted should be %s", i, cases[i].wanted ? "true" : "false");
                k8s_pod_free(pod);
        }
}

/* A volume only an ephemeral container mounts is wanted like any other:
 * kubelet's GetPodVolumeNames visits every container kind. */
static void test_ephemeral_container_mounts_count(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        DesiredPod *p = NULL;
        K8sPod *pod = decode(&k8s_kind_pod,
                             "{\"metadata\":{\"uid\":\"" UID "\",\"namespace\":\"ns1\",\"name\":\"web\","
                             "\"resourceVersion\":\"5\"},\"spec\":{\"nodeName\":\"node-a\","
                             "\"volumes\":[{\"name\":\"scratch\",\"csi\":{\"driver\":\"inline.example.com\"}},"
                             "{\"name\":\"other\",\"csi\":{\"driver\":\"inline.example.com\"}}],"
                             "\"containers\":[{\"name\":\"c\"}],"
                             "\"ephemeralContainers\":[{\"name\":\"debugger\",\"volumeMounts\":"
                             "[{\"name\":\"scratch\",\"mountPath\":\"/s\"}]}]},"
                             "\"status\":{\"phase\":\"Running\"}}");

        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_int_equal(p->n_volumes, 1);
        assert_non_null(desired_pod_find_volume(p, "scratch"));
        assert_non_null(desired_pod_find_volume(p, "scratch")->spec);
        desired_pod_free(p);
        k8s_pod_free(pod);
}

/* In-tree cloud volumes kubelet migrates are the CSI kind's: a claim's PV
 * and an inline volume become the CSI PV the translation makes (handle,
 * attributes), persistent, marked with their in-tree plugin; an inline one
 * is named after the translated PV, escaped ("/" -> "~") as kubelet's
 * getTargetPath, and is not read-only for the publish (kubelet's
 * Spec.ReadOnly of an inline volume).  A source the translation refuses
 * fails with kubelet's words; portworx (gate off) stays unsupported, and
 * so does every in-tree source when no kind in the list claims it. */
static void test_migrated_volumes(void **state) {
        Fake f = {};
        ClusterView view = { .get_pvc = get_pvc, .get_pv = get_pv, .userdata = &f, .lookup_error = lookup_error };
        K8sPod *pod = pod_with(
                "{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"claim\"}},"
                "{\"name\":\"ebs\",\"awsElasticBlockStore\":{\"volumeID\":\"aws:///vol-0a\",\"readOnly\":true}},"
                "{\"name\":\"disk\",\"azureDisk\":{\"diskName\":\"d\",\"diskURI\":\"/subscriptions/1/disks/d\","
                "\"kind\":\"Managed\"}},"
                "{\"name\":\"bad\",\"awsElasticBlockStore\":{\"volumeID\":\"aws://us-west-2a/02399794d890f9375\"}},"
                "{\"name\":\"px\",\"portworxVolume\":{\"volumeID\":\"px-1\"}},"
                "{\"name\":\"dev\",\"awsElasticBlockStore\":{\"volumeID\":\"vol-0b\"}}",
                "{\"name\":\"data\",\"mountPath\":\"/d\"},{\"name\":\"ebs\",\"mountPath\":\"/e\"},"
                "{\"name\":\"disk\",\"mountPath\":\"/k\"},{\"name\":\"bad\",\"mountPath\":\"/b\"},"
                "{\"name\":\"px\",\"mountPath\":\"/p\"}",
                "{\"name\":\"dev\",\"devicePath\":\"/dev/xvdf\"}");
        const VolumeKind *const no_csi[] = { &volume_kind_configmap, NULL };
        const DesiredVolume *v;
        DesiredPod *p = NULL;

        f.pvcs[0] = decode(&k8s_kind_pvc, PVC("claim", "pv-ebs"));
        f.pvs[0] = decode(&k8s_kind_pv, "{\"metadata\":{\"uid\":\"p1\",\"name\":\"pv-ebs\",\"resourceVersion\":\"1\"},"
                                        "\"spec\":{" REF_C1 "\"accessModes\":[\"ReadWriteOnce\"],"
                                        "\"awsElasticBlockStore\":{\"volumeID\":\"aws://us-west-2a/vol-02399794d890f9375\","
                                        "\"fsType\":\"ext4\"}}}");
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        v = desired_pod_find_volume(p, "data");
        assert_non_null(v->spec);
        assert_ptr_equal(v->spec->kind, &volume_kind_csi);
        assert_int_equal(v->spec->lifecycle, VOLUME_PERSISTENT);
        assert_string_equal(v->spec->driver, "ebs.csi.aws.com");
        assert_string_equal(v->spec->handle, "vol-02399794d890f9375");
        assert_string_equal(v->spec->unique_name, "kubernetes.io/csi/ebs.csi.aws.com^vol-02399794d890f9375");
        assert_string_equal(v->spec->spec_name, "pv-ebs");
        assert_string_equal(v->spec->fs_type, "ext4");
        assert_string_equal(k8s_string_map_get(&v->spec->attributes, "partition"), "0");
        assert_string_equal(v->spec->migrated_from, "kubernetes.io/aws-ebs");

        v = desired_pod_find_volume(p, "ebs");
        assert_non_null(v->spec);
        assert_int_equal(v->spec->lifecycle, VOLUME_PERSISTENT);
        assert_string_equal(v->spec->spec_name, "ebs.csi.aws.com-vol-0a");
        assert_string_equal(v->spec->unique_name, "kubernetes.io/csi/ebs.csi.aws.com^vol-0a");
        assert_false(v->spec->read_only);
        assert_string_equal(v->spec->migrated_from, "kubernetes.io/aws-ebs");

        v = desired_pod_find_volume(p, "disk");
        assert_non_null(v->spec);
        assert_string_equal(v->spec->spec_name, "~subscriptions~1~disks~d");
        assert_string_equal(v->spec->handle, "/subscriptions/1/disks/d");
        assert_string_equal(v->spec->migrated_from, "kubernetes.io/azure-disk");

        v = desired_pod_find_volume(p, "bad");
        assert_null(v->spec);
        assert_string_equal(v->failed, "failed to translate in-tree pv to CSI: failed to translate Kubernetes ID to "
                                       "EBS Volume ID Invalid format for AWS volume "
                                       "(aws://us-west-2a/02399794d890f9375)");
        v = desired_pod_find_volume(p, "px");
        assert_null(v->spec);
        assert_true(strstr(v->failed, "unsupported volume type portworxVolume: ") == v->failed);
        v = desired_pod_find_volume(p, "dev");
        assert_null(v->spec);
        assert_string_equal(v->failed, "volume dev has volumeMode Filesystem, but is specified in volumeDevices");
        desired_pod_free(p);

        /* No kind claims them: unsupported, by their source's name. */
        volume_kinds_set_for_tests(no_csi);
        assert_int_equal(desired_pod_build(pod, &view, &p, NULL), 0);
        assert_string_equal(desired_pod_find_volume(p, "data")->failed,
                            "unsupported volume type awsElasticBlockStore (persistentvolume \"pv-ebs\"): kvolumed "
                            "does not set up awsElasticBlockStore volumes; use a CSI driver, or set it up in the pod "
                            "runner and name awsElasticBlockStore in [volumes] runner-kinds");
        assert_true(strstr(desired_pod_find_volume(p, "ebs")->failed, "unsupported volume type awsElasticBlockStore: ") ==
                    desired_pod_find_volume(p, "ebs")->failed);
        volume_kinds_set_for_tests(NULL);
        desired_pod_free(p);
        k8s_pod_free(pod);
        fake_free(&f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_inline_volume),
                cmocka_unit_test(test_pvc_waits_then_resolves),
                cmocka_unit_test(test_generic_ephemeral_and_non_csi),
                cmocka_unit_test(test_runner_kinds_and_validation),
                cmocka_unit_test(test_mode_mismatch_and_other_claim),
                cmocka_unit_test(test_refused_lookup_waits_with_server_message),
                cmocka_unit_test(test_malicious_names_refused),
                cmocka_unit_test(test_claim_binding_checked),
                cmocka_unit_test(test_pod_volumes_wanted),
                cmocka_unit_test(test_pod_volumes_wanted_every_container_kind),
                cmocka_unit_test(test_ephemeral_container_mounts_count),
                cmocka_unit_test(test_migrated_volumes),
                cmocka_unit_test(test_selinux_label),
                cmocka_unit_test(test_selinux_context_and_rwop),
                cmocka_unit_test(test_fs_group_rule),
                cmocka_unit_test(test_volume_selinux_label_from_containers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
