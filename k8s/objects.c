/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "k8s/base64.h"
#include "k8s/objects.h"
#include "systemd/validate.h"

#define TRY(expr)                                                                                          \
        do {                                                                                               \
                int _r = (expr);                                                                           \
                if (_r < 0)                                                                                \
                        return _r;                                                                         \
        } while (0)

/* Runs "body" for each element of array "arr" with the path extended by
 * "key[i]"; "e" is the element and "i" its index. */
#define FOREACH_ELEMENT(p, key, arr, e, i)                                                                 \
        for (size_t _saved = k8s_json_path_push(p, key), i = 0, _once = 1; _once; _once = 0, k8s_json_path_pop(p, _saved)) \
                for (const cJSON *e = (arr) ? (arr)->child : NULL; e; e = e->next, i++)

static void meta_done(K8sMeta *m) {
        free(m->uid);
        free(m->namespace);
        free(m->name);
        free(m->resource_version);
        free(m->deletion_timestamp);
        free(m->controller_kind);
        free(m->controller_uid);
}

static int meta_decode(JsonPath *p, const cJSON *j, bool need_uid, K8sMeta *m) {
        const cJSON *md;

        TRY(k8s_json_get_object(p, j, "metadata", JSON_REQUIRED, &md));
        size_t saved = k8s_json_path_push(p, "metadata");
        TRY(k8s_json_get_string(p, md, "name", JSON_REQUIRED, &m->name));
        TRY(k8s_json_get_string(p, md, "namespace", JSON_OPTIONAL, &m->namespace));
        TRY(k8s_json_get_string(p, md, "uid", need_uid ? JSON_REQUIRED : JSON_OPTIONAL, &m->uid));
        TRY(k8s_json_get_string(p, md, "resourceVersion", JSON_OPTIONAL, &m->resource_version));
        TRY(k8s_json_get_string(p, md, "deletionTimestamp", JSON_OPTIONAL, &m->deletion_timestamp));
        const cJSON *owners;
        size_t n_owners;
        TRY(k8s_json_get_array(p, md, "ownerReferences", JSON_OPTIONAL, &owners, &n_owners));
        FOREACH_ELEMENT(p, "ownerReferences", owners, o, i) {
                bool controller = false;
                TRY(k8s_json_get_bool(p, o, "controller", false, &controller));
                if (!controller || m->controller_uid)
                        continue;
                TRY(k8s_json_get_string(p, o, "kind", JSON_REQUIRED, &m->controller_kind));
                TRY(k8s_json_get_string(p, o, "uid", JSON_REQUIRED, &m->controller_uid));
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

static void secret_ref_done(K8sSecretRef *r) {
        free(r->name);
        free(r->namespace);
}

static int secret_ref_decode(JsonPath *p, const cJSON *j, const char *key, K8sSecretRef *ret) {
        const cJSON *o;

        TRY(k8s_json_get_object(p, j, key, JSON_OPTIONAL, &o));
        if (!o)
                return 0;
        size_t saved = k8s_json_path_push(p, key);
        TRY(k8s_json_get_string(p, o, "name", JSON_REQUIRED, &ret->name));
        TRY(k8s_json_get_string(p, o, "namespace", JSON_OPTIONAL, &ret->namespace));
        k8s_json_path_pop(p, saved);
        return 0;
}

/* --- quantities ------------------------------------------------------------- */

int k8s_quantity_parse(const char *s, int64_t *ret) {
        static const struct {
                const char *suffix;
                int base, exponent; /* base^exponent */
        } suffixes[] = {
                { "Ki", 2, 10 }, { "Mi", 2, 20 }, { "Gi", 2, 30 }, { "Ti", 2, 40 }, { "Pi", 2, 50 }, { "Ei", 2, 60 },
                { "n", 10, -9 }, { "u", 10, -6 }, { "m", 10, -3 }, { "", 10, 0 },   { "k", 10, 3 },
                { "M", 10, 6 },  { "G", 10, 9 },  { "T", 10, 12 }, { "P", 10, 15 }, { "E", 10, 18 },
        };
        /* Digits kept exactly: an unsigned __int128 holds 38 of them, and a
         * quantity the API server accepts has few. */
        unsigned __int128 mantissa = 0, limit = (unsigned __int128) INT64_MAX;
        int scale = 0, exponent = 0, base = 10;
        bool digits = false, dot = false;
        const char *c = s;

        if (!s)
                return -EINVAL;
        if (*c == '+')
                c++;
        else if (*c == '-')
                return -ERANGE; /* no negative sizes */
        for (; (*c >= '0' && *c <= '9') || (*c == '.' && !dot); c++) {
                if (*c == '.') {
                        dot = true;
                        continue;
                }
                digits = true;
                if (mantissa > ((unsigned __int128) 1 << 100))
                        return -ERANGE;
                mantissa = mantissa * 10 + (unsigned) (*c - '0');
                if (dot)
                        scale--;
        }
        if (!digits)
                return -EINVAL;
        if ((*c == 'e' || *c == 'E') && c[1] && strchr("+-0123456789", c[1])) {
                char *end;
                long e;
                errno = 0;
                e = strtol(c + 1, &end, 10);
                if (end == c + 1 || *end || errno || e < -30 || e > 30)
                        return -EINVAL;
                exponent = (int) e;
                base = 10;
        } else {
                size_t i;
                for (i = 0; i < ELEMENTSOF(suffixes); i++)
                        if (streq(c, suffixes[i].suffix))
                                break;
                if (i == ELEMENTSOF(suffixes))
                        return -EINVAL;
                base = suffixes[i].base;
                exponent = suffixes[i].exponent;
        }
        /* value = mantissa * 10^scale * base^exponent, rounded up. */
        if (base == 10)
                scale += exponent;
        else
                for (int i = 0; i < exponent; i++) {
                        mantissa *= 2;
                        if (mantissa > limit * 1000000000000000000ULL)
                                return -ERANGE;
                }
        for (; scale > 0; scale--) {
                mantissa *= 10;
                if (mantissa > limit * 1000000000000000000ULL)
                        return -ERANGE;
        }
        for (bool remainder = false; scale < 0; scale++) {
                remainder = remainder || mantissa % 10 != 0;
                mantissa /= 10;
                if (scale == -1 && remainder)
                        mantissa++;
        }
        if (mantissa > limit)
                return -ERANGE;
        *ret = (int64_t) mantissa;
        return 0;
}

const char *k8s_meta_describe(const K8sMeta *m, char *buf, size_t size) {
        if (m->namespace)
                snprintf(buf, size, "%s/%s", m->namespace, strempty(m->name));
        else
                snprintf(buf, size, "%s", strempty(m->name));
        return buf;
}

/* --- Pod ---------------------------------------------------------------- */

static void pod_csi_free(K8sPodCsiSource *c) {
        if (!c)
                return;
        free(c->driver);
        free(c->fs_type);
        k8s_string_map_done(&c->volume_attributes);
        free(c->node_publish_secret_name);
        free(c);
}

static void containers_free(K8sContainer *c, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(c[i].name);
                for (size_t k = 0; k < c[i].n_mounts; k++) {
                        free(c[i].mounts[k].name);
                        free(c[i].mounts[k].path);
                }
                free(c[i].mounts);
                for (size_t k = 0; k < c[i].n_devices; k++) {
                        free(c[i].devices[k].name);
                        free(c[i].devices[k].path);
                }
                free(c[i].devices);
                free(c[i].selinux_user);
                free(c[i].selinux_role);
                free(c[i].selinux_type);
                free(c[i].selinux_level);
        }
        free(c);
}

static void statuses_free(K8sContainerStatus *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(s[i].name);
        free(s);
}

K8sPod *k8s_pod_free(K8sPod *p) {
        if (!p)
                return NULL;
        meta_done(&p->meta);
        free(p->node_name);
        free(p->phase);
        free(p->service_account_name);
        free(p->fs_group_change_policy);
        free(p->selinux_user);
        free(p->selinux_role);
        free(p->selinux_type);
        free(p->selinux_level);
        free(p->selinux_change_policy);
        for (size_t i = 0; i < p->n_volumes; i++) {
                free(p->volumes[i].name);
                pod_csi_free(p->volumes[i].csi);
                free(p->volumes[i].claim_name);
        }
        free(p->volumes);
        containers_free(p->containers, p->n_containers);
        containers_free(p->init_containers, p->n_init_containers);
        containers_free(p->ephemeral_containers, p->n_ephemeral_containers);
        statuses_free(p->container_statuses, p->n_container_statuses);
        statuses_free(p->init_container_statuses, p->n_init_container_statuses);
        statuses_free(p->ephemeral_container_statuses, p->n_ephemeral_container_statuses);
        free(p);
        return NULL;
}

static int pod_volume_decode(JsonPath *p, const cJSON *j, K8sPodVolume *v) {
        const cJSON *o;

        if (!cJSON_IsObject(j))
                return k8s_json_fail(p, NULL, "not an object");
        TRY(k8s_json_get_string(p, j, "name", JSON_REQUIRED, &v->name));

        TRY(k8s_json_get_object(p, j, "csi", JSON_OPTIONAL, &o));
        if (o) {
                size_t saved = k8s_json_path_push(p, "csi");
                v->csi = calloc(1, sizeof *v->csi);
                if (!v->csi)
                        return -ENOMEM;
                TRY(k8s_json_get_string(p, o, "driver", JSON_REQUIRED, &v->csi->driver));
                TRY(k8s_json_get_bool(p, o, "readOnly", false, &v->csi->read_only));
                TRY(k8s_json_get_string(p, o, "fsType", JSON_OPTIONAL, &v->csi->fs_type));
                TRY(k8s_json_get_string_map(p, o, "volumeAttributes", &v->csi->volume_attributes));
                const cJSON *ref;
                TRY(k8s_json_get_object(p, o, "nodePublishSecretRef", JSON_OPTIONAL, &ref));
                if (ref) {
                        size_t s2 = k8s_json_path_push(p, "nodePublishSecretRef");
                        TRY(k8s_json_get_string(p, ref, "name", JSON_REQUIRED, &v->csi->node_publish_secret_name));
                        k8s_json_path_pop(p, s2);
                }
                k8s_json_path_pop(p, saved);
        }

        TRY(k8s_json_get_object(p, j, "persistentVolumeClaim", JSON_OPTIONAL, &o));
        if (o) {
                size_t saved = k8s_json_path_push(p, "persistentVolumeClaim");
                TRY(k8s_json_get_string(p, o, "claimName", JSON_REQUIRED, &v->claim_name));
                TRY(k8s_json_get_bool(p, o, "readOnly", false, &v->claim_read_only));
                k8s_json_path_pop(p, saved);
        }

        TRY(k8s_json_get_object(p, j, "ephemeral", JSON_OPTIONAL, &o));
        v->ephemeral = o != NULL;
        return 0;
}

static int mounts_decode(JsonPath *p, const cJSON *j, const char *key, const char *path_key,
                         K8sVolumeMount **ret, size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(k8s_json_get_array(p, j, key, JSON_OPTIONAL, &a, &n));
        if (n == 0)
                return 0;
        *ret = calloc(n, sizeof **ret);
        if (!*ret)
                return -ENOMEM;
        FOREACH_ELEMENT(p, key, a, e, i) {
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "name", JSON_REQUIRED, &(*ret)[i].name));
                TRY(k8s_json_get_string(p, e, path_key, JSON_REQUIRED, &(*ret)[i].path));
                TRY(k8s_json_get_bool(p, e, "readOnly", false, &(*ret)[i].read_only));
                k8s_json_path_pop(p, s2);
        }
        return 0;
}

/* A container's securityContext.seLinuxOptions: the volumes it mounts get
 * their SELinux label from them (kubelet's GetPodVolumeNames). */
static int container_selinux_decode(JsonPath *p, const cJSON *container, K8sContainer *c) {
        const cJSON *sc, *se;

        TRY(k8s_json_get_object(p, container, "securityContext", JSON_OPTIONAL, &sc));
        if (!sc)
                return 0;
        size_t s1 = k8s_json_path_push(p, "securityContext");
        TRY(k8s_json_get_object(p, sc, "seLinuxOptions", JSON_OPTIONAL, &se));
        if (se) {
                size_t s2 = k8s_json_path_push(p, "seLinuxOptions");
                c->has_selinux = true;
                TRY(k8s_json_get_string(p, se, "user", JSON_OPTIONAL, &c->selinux_user));
                TRY(k8s_json_get_string(p, se, "role", JSON_OPTIONAL, &c->selinux_role));
                TRY(k8s_json_get_string(p, se, "type", JSON_OPTIONAL, &c->selinux_type));
                TRY(k8s_json_get_string(p, se, "level", JSON_OPTIONAL, &c->selinux_level));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, s1);
        return 0;
}

static int containers_decode(JsonPath *p, const cJSON *spec, const char *key, K8sContainer **ret,
                             size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(k8s_json_get_array(p, spec, key, JSON_OPTIONAL, &a, &n));
        if (n == 0)
                return 0;
        *ret = calloc(n, sizeof **ret);
        if (!*ret)
                return -ENOMEM;
        FOREACH_ELEMENT(p, key, a, e, i) {
                K8sContainer *c = &(*ret)[i];
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "name", JSON_REQUIRED, &c->name));
                TRY(mounts_decode(p, e, "volumeMounts", "mountPath", &c->mounts, &c->n_mounts));
                TRY(mounts_decode(p, e, "volumeDevices", "devicePath", &c->devices, &c->n_devices));
                TRY(container_selinux_decode(p, e, c));
                k8s_json_path_pop(p, s2);
        }
        return 0;
}

static int statuses_decode(JsonPath *p, const cJSON *status, const char *key, K8sContainerStatus **ret,
                           size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(k8s_json_get_array(p, status, key, JSON_OPTIONAL, &a, &n));
        if (n == 0)
                return 0;
        *ret = calloc(n, sizeof **ret);
        if (!*ret)
                return -ENOMEM;
        FOREACH_ELEMENT(p, key, a, e, i) {
                K8sContainerStatus *s = &(*ret)[i];
                const cJSON *state, *o;
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "name", JSON_REQUIRED, &s->name));
                TRY(k8s_json_get_object(p, e, "state", JSON_OPTIONAL, &state));
                if (state) {
                        size_t s3 = k8s_json_path_push(p, "state");
                        TRY(k8s_json_get_object(p, state, "running", JSON_OPTIONAL, &o));
                        s->running = o != NULL;
                        TRY(k8s_json_get_object(p, state, "terminated", JSON_OPTIONAL, &o));
                        s->terminated = o != NULL;
                        if (o) {
                                size_t s4 = k8s_json_path_push(p, "terminated");
                                TRY(k8s_json_get_int(p, o, "exitCode", INT32_MIN, INT32_MAX, NULL, &s->exit_code));
                                k8s_json_path_pop(p, s4);
                        }
                        k8s_json_path_pop(p, s3);
                }
                k8s_json_path_pop(p, s2);
        }
        return 0;
}

int k8s_pod_from_json(const cJSON *j, K8sPod **ret, K8sDecodeError *error) {
        _cleanup_(k8s_pod_freep) K8sPod *pod = NULL;
        const cJSON *spec, *status, *sc, *a;
        JsonPath p;
        size_t n;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        pod = calloc(1, sizeof *pod);
        if (!pod)
                return -ENOMEM;
        TRY(meta_decode(&p, j, true, &pod->meta));

        TRY(k8s_json_get_object(&p, j, "spec", JSON_REQUIRED, &spec));
        size_t saved = k8s_json_path_push(&p, "spec");
        TRY(k8s_json_get_string(&p, spec, "nodeName", JSON_OPTIONAL, &pod->node_name));
        TRY(k8s_json_get_string(&p, spec, "serviceAccountName", JSON_OPTIONAL, &pod->service_account_name));
        TRY(k8s_json_get_object(&p, spec, "securityContext", JSON_OPTIONAL, &sc));
        if (sc) {
                size_t s2 = k8s_json_path_push(&p, "securityContext");
                TRY(k8s_json_get_int(&p, sc, "fsGroup", 0, UINT32_MAX, &pod->has_fs_group, &pod->fs_group));
                TRY(k8s_json_get_string(&p, sc, "fsGroupChangePolicy", JSON_OPTIONAL, &pod->fs_group_change_policy));
                TRY(k8s_json_get_string(&p, sc, "seLinuxChangePolicy", JSON_OPTIONAL, &pod->selinux_change_policy));
                const cJSON *se;
                TRY(k8s_json_get_object(&p, sc, "seLinuxOptions", JSON_OPTIONAL, &se));
                if (se) {
                        size_t s3 = k8s_json_path_push(&p, "seLinuxOptions");
                        TRY(k8s_json_get_string(&p, se, "user", JSON_OPTIONAL, &pod->selinux_user));
                        TRY(k8s_json_get_string(&p, se, "role", JSON_OPTIONAL, &pod->selinux_role));
                        TRY(k8s_json_get_string(&p, se, "type", JSON_OPTIONAL, &pod->selinux_type));
                        TRY(k8s_json_get_string(&p, se, "level", JSON_OPTIONAL, &pod->selinux_level));
                        k8s_json_path_pop(&p, s3);
                }
                k8s_json_path_pop(&p, s2);
        }
        TRY(k8s_json_get_array(&p, spec, "volumes", JSON_OPTIONAL, &a, &n));
        if (n > 0) {
                pod->volumes = calloc(n, sizeof *pod->volumes);
                if (!pod->volumes)
                        return -ENOMEM;
                FOREACH_ELEMENT(&p, "volumes", a, e, i) {
                        size_t s2 = k8s_json_path_push_index(&p, i);
                        pod->n_volumes++;
                        TRY(pod_volume_decode(&p, e, &pod->volumes[i]));
                        k8s_json_path_pop(&p, s2);
                }
        }
        TRY(containers_decode(&p, spec, "containers", &pod->containers, &pod->n_containers));
        TRY(containers_decode(&p, spec, "initContainers", &pod->init_containers, &pod->n_init_containers));
        TRY(containers_decode(&p, spec, "ephemeralContainers", &pod->ephemeral_containers,
                              &pod->n_ephemeral_containers));
        k8s_json_path_pop(&p, saved);

        TRY(k8s_json_get_object(&p, j, "status", JSON_OPTIONAL, &status));
        if (status) {
                saved = k8s_json_path_push(&p, "status");
                TRY(k8s_json_get_string(&p, status, "phase", JSON_OPTIONAL, &pod->phase));
                TRY(statuses_decode(&p, status, "containerStatuses", &pod->container_statuses,
                                    &pod->n_container_statuses));
                TRY(statuses_decode(&p, status, "initContainerStatuses", &pod->init_container_statuses,
                                    &pod->n_init_container_statuses));
                TRY(statuses_decode(&p, status, "ephemeralContainerStatuses",
                                    &pod->ephemeral_container_statuses,
                                    &pod->n_ephemeral_container_statuses));
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(pod);
        return 0;
}

int k8s_pod_validate_names(const K8sPod *p, const char **ret_field) {
        const char *field = NULL;

        if (validate_uid(p->meta.uid) < 0)
                field = "metadata.uid";
        else if (validate_dns1123_label(p->meta.namespace) < 0)
                field = "metadata.namespace";
        else if (validate_dns1123_subdomain(p->meta.name) < 0)
                field = "metadata.name";
        else
                for (size_t i = 0; i < p->n_volumes; i++)
                        if (validate_dns1123_label(p->volumes[i].name) < 0) {
                                field = "spec.volumes[].name";
                                break;
                        }
        if (ret_field)
                *ret_field = field;
        return field ? -EINVAL : 0;
}

/* --- PVC ---------------------------------------------------------------- */

K8sPersistentVolumeClaim *k8s_pvc_free(K8sPersistentVolumeClaim *c) {
        if (!c)
                return NULL;
        meta_done(&c->meta);
        free(c->volume_name);
        free(c->phase);
        k8s_strv_free(c->access_modes);
        free(c->volume_mode);
        free(c->capacity);
        free(c->resize_status);
        free(c);
        return NULL;
}

/* One key of an object of strings ("capacity": {"storage": "1Gi"}). */
static int get_map_entry(JsonPath *p, const cJSON *obj, const char *map, const char *key, char **ret) {
        _cleanup_(k8s_string_map_done) K8sStringMap m = {};
        const char *v;

        TRY(k8s_json_get_string_map(p, obj, map, &m));
        v = k8s_string_map_get(&m, key);
        if (v && !(*ret = strdup(v)))
                return -ENOMEM;
        return 0;
}

int k8s_pvc_from_json(const cJSON *j, K8sPersistentVolumeClaim **ret, K8sDecodeError *error) {
        _cleanup_(k8s_pvc_freep) K8sPersistentVolumeClaim *c = NULL;
        const cJSON *spec, *status;
        JsonPath p;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        TRY(meta_decode(&p, j, true, &c->meta));
        TRY(k8s_json_get_object(&p, j, "spec", JSON_REQUIRED, &spec));
        size_t saved = k8s_json_path_push(&p, "spec");
        TRY(k8s_json_get_string(&p, spec, "volumeName", JSON_OPTIONAL, &c->volume_name));
        TRY(k8s_json_get_strv(&p, spec, "accessModes", &c->access_modes));
        TRY(k8s_json_get_string(&p, spec, "volumeMode", JSON_OPTIONAL, &c->volume_mode));
        k8s_json_path_pop(&p, saved);
        if (!c->volume_mode && !(c->volume_mode = strdup("Filesystem")))
                return -ENOMEM;
        TRY(k8s_json_get_object(&p, j, "status", JSON_OPTIONAL, &status));
        if (status) {
                saved = k8s_json_path_push(&p, "status");
                TRY(k8s_json_get_string(&p, status, "phase", JSON_OPTIONAL, &c->phase));
                TRY(get_map_entry(&p, status, "capacity", "storage", &c->capacity));
                TRY(get_map_entry(&p, status, "allocatedResourceStatuses", "storage", &c->resize_status));
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(c);
        return 0;
}

/* --- PV ----------------------------------------------------------------- */

static void pv_csi_free(K8sPvCsiSource *c) {
        if (!c)
                return;
        free(c->driver);
        free(c->volume_handle);
        free(c->fs_type);
        k8s_string_map_done(&c->volume_attributes);
        secret_ref_done(&c->controller_publish_secret);
        secret_ref_done(&c->node_stage_secret);
        secret_ref_done(&c->node_publish_secret);
        secret_ref_done(&c->node_expand_secret);
        secret_ref_done(&c->controller_expand_secret);
        free(c);
}

K8sPersistentVolume *k8s_pv_free(K8sPersistentVolume *v) {
        if (!v)
                return NULL;
        meta_done(&v->meta);
        pv_csi_free(v->csi);
        free(v->volume_mode);
        k8s_strv_free(v->mount_options);
        k8s_strv_free(v->access_modes);
        free(v->claim_namespace);
        free(v->claim_name);
        free(v->claim_uid);
        free(v->phase);
        free(v->capacity);
        free(v);
        return NULL;
}

int k8s_pv_from_json(const cJSON *j, K8sPersistentVolume **ret, K8sDecodeError *error) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *v = NULL;
        const cJSON *spec, *status, *o;
        JsonPath p;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        v = calloc(1, sizeof *v);
        if (!v)
                return -ENOMEM;
        TRY(meta_decode(&p, j, true, &v->meta));
        TRY(k8s_json_get_object(&p, j, "spec", JSON_REQUIRED, &spec));
        size_t saved = k8s_json_path_push(&p, "spec");
        TRY(k8s_json_get_object(&p, spec, "csi", JSON_OPTIONAL, &o));
        if (o) {
                size_t s2 = k8s_json_path_push(&p, "csi");
                v->csi = calloc(1, sizeof *v->csi);
                if (!v->csi)
                        return -ENOMEM;
                TRY(k8s_json_get_string(&p, o, "driver", JSON_REQUIRED, &v->csi->driver));
                TRY(k8s_json_get_string(&p, o, "volumeHandle", JSON_REQUIRED, &v->csi->volume_handle));
                TRY(k8s_json_get_bool(&p, o, "readOnly", false, &v->csi->read_only));
                TRY(k8s_json_get_string(&p, o, "fsType", JSON_OPTIONAL, &v->csi->fs_type));
                TRY(k8s_json_get_string_map(&p, o, "volumeAttributes", &v->csi->volume_attributes));
                TRY(secret_ref_decode(&p, o, "controllerPublishSecretRef", &v->csi->controller_publish_secret));
                TRY(secret_ref_decode(&p, o, "nodeStageSecretRef", &v->csi->node_stage_secret));
                TRY(secret_ref_decode(&p, o, "nodePublishSecretRef", &v->csi->node_publish_secret));
                TRY(secret_ref_decode(&p, o, "nodeExpandSecretRef", &v->csi->node_expand_secret));
                TRY(secret_ref_decode(&p, o, "controllerExpandSecretRef", &v->csi->controller_expand_secret));
                k8s_json_path_pop(&p, s2);
        }
        TRY(k8s_json_get_string(&p, spec, "volumeMode", JSON_OPTIONAL, &v->volume_mode));
        TRY(k8s_json_get_strv(&p, spec, "mountOptions", &v->mount_options));
        TRY(k8s_json_get_strv(&p, spec, "accessModes", &v->access_modes));
        TRY(get_map_entry(&p, spec, "capacity", "storage", &v->capacity));
        TRY(k8s_json_get_object(&p, spec, "claimRef", JSON_OPTIONAL, &o));
        v->has_claim_ref = o != NULL;
        if (o) {
                size_t s2 = k8s_json_path_push(&p, "claimRef");
                TRY(k8s_json_get_string(&p, o, "namespace", JSON_OPTIONAL, &v->claim_namespace));
                TRY(k8s_json_get_string(&p, o, "name", JSON_OPTIONAL, &v->claim_name));
                TRY(k8s_json_get_string(&p, o, "uid", JSON_OPTIONAL, &v->claim_uid));
                k8s_json_path_pop(&p, s2);
        }
        k8s_json_path_pop(&p, saved);
        if (!v->volume_mode && !(v->volume_mode = strdup("Filesystem")))
                return -ENOMEM;
        TRY(k8s_json_get_object(&p, j, "status", JSON_OPTIONAL, &status));
        if (status) {
                saved = k8s_json_path_push(&p, "status");
                TRY(k8s_json_get_string(&p, status, "phase", JSON_OPTIONAL, &v->phase));
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(v);
        return 0;
}

/* --- CSIDriver ------------------------------------------------------------ */

K8sCSIDriver *k8s_csidriver_free(K8sCSIDriver *d) {
        if (!d)
                return NULL;
        meta_done(&d->meta);
        k8s_strv_free(d->volume_lifecycle_modes);
        free(d->fs_group_policy);
        for (size_t i = 0; i < d->n_token_requests; i++)
                free(d->token_requests[i].audience);
        free(d->token_requests);
        free(d);
        return NULL;
}

int k8s_csidriver_from_json(const cJSON *j, K8sCSIDriver **ret, K8sDecodeError *error) {
        _cleanup_(k8s_csidriver_freep) K8sCSIDriver *d = NULL;
        const cJSON *spec, *a;
        JsonPath p;
        size_t n;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        TRY(meta_decode(&p, j, false, &d->meta));
        /* The API server always sets spec; an absent one gets every default. */
        TRY(k8s_json_get_object(&p, j, "spec", JSON_OPTIONAL, &spec));
        size_t saved = k8s_json_path_push(&p, "spec");
        TRY(k8s_json_get_bool(&p, spec, "attachRequired", true, &d->attach_required));
        TRY(k8s_json_get_bool(&p, spec, "podInfoOnMount", false, &d->pod_info_on_mount));
        TRY(k8s_json_get_strv(&p, spec, "volumeLifecycleModes", &d->volume_lifecycle_modes));
        TRY(k8s_json_get_bool(&p, spec, "storageCapacity", false, &d->storage_capacity));
        TRY(k8s_json_get_string(&p, spec, "fsGroupPolicy", JSON_OPTIONAL, &d->fs_group_policy));
        TRY(k8s_json_get_array(&p, spec, "tokenRequests", JSON_OPTIONAL, &a, &n));
        if (n > 0) {
                d->token_requests = calloc(n, sizeof *d->token_requests);
                if (!d->token_requests)
                        return -ENOMEM;
                FOREACH_ELEMENT(&p, "tokenRequests", a, e, i) {
                        K8sTokenRequest *t = &d->token_requests[i];
                        size_t s2 = k8s_json_path_push_index(&p, i);
                        if (!cJSON_IsObject(e))
                                return k8s_json_fail(&p, NULL, "not an object");
                        d->n_token_requests++;
                        TRY(k8s_json_get_string(&p, e, "audience", JSON_OPTIONAL, &t->audience));
                        if (!t->audience && !(t->audience = strdup("")))
                                return -ENOMEM;
                        TRY(k8s_json_get_int(&p, e, "expirationSeconds", 0, INT64_MAX, &t->has_expiration_seconds,
                                         &t->expiration_seconds));
                        k8s_json_path_pop(&p, s2);
                }
        }
        TRY(k8s_json_get_bool(&p, spec, "requiresRepublish", false, &d->requires_republish));
        TRY(k8s_json_get_bool(&p, spec, "seLinuxMount", false, &d->se_linux_mount));
        TRY(k8s_json_get_int(&p, spec, "nodeAllocatableUpdatePeriodSeconds", 0, INT64_MAX,
                         &d->has_node_allocatable_update_period_seconds, &d->node_allocatable_update_period_seconds));
        TRY(k8s_json_get_bool(&p, spec, "serviceAccountTokenInSecrets", false, &d->service_account_token_in_secrets));
        k8s_json_path_pop(&p, saved);

        if (!d->volume_lifecycle_modes) {
                d->volume_lifecycle_modes = calloc(2, sizeof(char *));
                if (!d->volume_lifecycle_modes || !(d->volume_lifecycle_modes[0] = strdup("Persistent")))
                        return -ENOMEM;
        }
        if (!d->fs_group_policy && !(d->fs_group_policy = strdup("ReadWriteOnceWithFSType")))
                return -ENOMEM;
        *ret = TAKE_PTR(d);
        return 0;
}

/* --- VolumeAttachment ------------------------------------------------------ */

K8sVolumeAttachment *k8s_volume_attachment_free(K8sVolumeAttachment *va) {
        if (!va)
                return NULL;
        meta_done(&va->meta);
        free(va->attacher);
        free(va->node_name);
        free(va->persistent_volume_name);
        k8s_string_map_done(&va->attachment_metadata);
        free(va->attach_error_message);
        free(va);
        return NULL;
}

int k8s_volume_attachment_from_json(const cJSON *j, K8sVolumeAttachment **ret, K8sDecodeError *error) {
        _cleanup_(k8s_volume_attachment_freep) K8sVolumeAttachment *va = NULL;
        const cJSON *spec, *status, *o;
        JsonPath p;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        va = calloc(1, sizeof *va);
        if (!va)
                return -ENOMEM;
        TRY(meta_decode(&p, j, false, &va->meta));
        TRY(k8s_json_get_object(&p, j, "spec", JSON_REQUIRED, &spec));
        size_t saved = k8s_json_path_push(&p, "spec");
        TRY(k8s_json_get_string(&p, spec, "attacher", JSON_REQUIRED, &va->attacher));
        TRY(k8s_json_get_string(&p, spec, "nodeName", JSON_REQUIRED, &va->node_name));
        TRY(k8s_json_get_object(&p, spec, "source", JSON_OPTIONAL, &o));
        if (o) {
                size_t s2 = k8s_json_path_push(&p, "source");
                TRY(k8s_json_get_string(&p, o, "persistentVolumeName", JSON_OPTIONAL, &va->persistent_volume_name));
                k8s_json_path_pop(&p, s2);
        }
        k8s_json_path_pop(&p, saved);
        TRY(k8s_json_get_object(&p, j, "status", JSON_OPTIONAL, &status));
        if (status) {
                saved = k8s_json_path_push(&p, "status");
                TRY(k8s_json_get_bool(&p, status, "attached", false, &va->attached));
                TRY(k8s_json_get_string_map(&p, status, "attachmentMetadata", &va->attachment_metadata));
                TRY(k8s_json_get_object(&p, status, "attachError", JSON_OPTIONAL, &o));
                if (o) {
                        size_t s2 = k8s_json_path_push(&p, "attachError");
                        TRY(k8s_json_get_string(&p, o, "message", JSON_OPTIONAL, &va->attach_error_message));
                        if (!va->attach_error_message && !(va->attach_error_message = strdup("")))
                                return -ENOMEM;
                        TRY(k8s_json_get_int(&p, o, "errorCode", INT32_MIN, INT32_MAX, &va->has_attach_error_code,
                                         &va->attach_error_code));
                        k8s_json_path_pop(&p, s2);
                }
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(va);
        return 0;
}

/* --- Node ------------------------------------------------------------------ */

K8sNode *k8s_node_free(K8sNode *n) {
        if (!n)
                return NULL;
        meta_done(&n->meta);
        k8s_string_map_done(&n->annotations);
        k8s_string_map_done(&n->labels);
        for (size_t i = 0; i < n->n_volumes_attached; i++) {
                free(n->volumes_attached[i].name);
                free(n->volumes_attached[i].device_path);
        }
        free(n->volumes_attached);
        k8s_strv_free(n->volumes_in_use);
        free(n);
        return NULL;
}

int k8s_node_from_json(const cJSON *j, K8sNode **ret, K8sDecodeError *error) {
        _cleanup_(k8s_node_freep) K8sNode *node = NULL;
        const cJSON *md, *status, *a;
        JsonPath p;
        size_t n;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        node = calloc(1, sizeof *node);
        if (!node)
                return -ENOMEM;
        TRY(meta_decode(&p, j, true, &node->meta));
        md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
        size_t saved = k8s_json_path_push(&p, "metadata");
        TRY(k8s_json_get_string_map(&p, md, "annotations", &node->annotations));
        TRY(k8s_json_get_string_map(&p, md, "labels", &node->labels));
        k8s_json_path_pop(&p, saved);
        TRY(k8s_json_get_object(&p, j, "status", JSON_OPTIONAL, &status));
        if (status) {
                saved = k8s_json_path_push(&p, "status");
                TRY(k8s_json_get_array(&p, status, "volumesAttached", JSON_OPTIONAL, &a, &n));
                if (n > 0) {
                        node->volumes_attached = calloc(n, sizeof *node->volumes_attached);
                        if (!node->volumes_attached)
                                return -ENOMEM;
                        FOREACH_ELEMENT(&p, "volumesAttached", a, e, i) {
                                K8sAttachedVolume *v = &node->volumes_attached[i];
                                size_t s2 = k8s_json_path_push_index(&p, i);
                                if (!cJSON_IsObject(e))
                                        return k8s_json_fail(&p, NULL, "not an object");
                                node->n_volumes_attached++;
                                TRY(k8s_json_get_string(&p, e, "name", JSON_REQUIRED, &v->name));
                                TRY(k8s_json_get_string(&p, e, "devicePath", JSON_OPTIONAL, &v->device_path));
                                if (!v->device_path && !(v->device_path = strdup("")))
                                        return -ENOMEM;
                                k8s_json_path_pop(&p, s2);
                        }
                }
                TRY(k8s_json_get_strv(&p, status, "volumesInUse", &node->volumes_in_use));
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(node);
        return 0;
}

/* --- Secret ---------------------------------------------------------------- */

K8sSecret *k8s_secret_free(K8sSecret *s) {
        if (!s)
                return NULL;
        meta_done(&s->meta);
        free(s->type);
        for (size_t i = 0; i < s->n_data; i++) {
                if (s->data[i].key) {
                        explicit_bzero(s->data[i].key, strlen(s->data[i].key));
                        free(s->data[i].key);
                }
                if (s->data[i].value) {
                        explicit_bzero(s->data[i].value, s->data[i].size);
                        free(s->data[i].value);
                }
        }
        free(s->data);
        free(s);
        return NULL;
}

const K8sSecretEntry *k8s_secret_get(const K8sSecret *s, const char *key) {
        for (size_t i = 0; i < s->n_data; i++)
                if (streq(s->data[i].key, key))
                        return &s->data[i];
        return NULL;
}

int k8s_secret_from_json(const cJSON *j, K8sSecret **ret, K8sDecodeError *error) {
        _cleanup_(k8s_secret_freep) K8sSecret *s = NULL;
        const cJSON *data, *e;
        JsonPath p;
        size_t n = 0;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        TRY(meta_decode(&p, j, false, &s->meta));
        TRY(k8s_json_get_string(&p, j, "type", JSON_OPTIONAL, &s->type));
        TRY(k8s_json_get_object(&p, j, "data", JSON_OPTIONAL, &data));
        if (data) {
                cJSON_ArrayForEach(e, data)
                        n++;
                if (n > K8S_MAX_ITEMS)
                        return k8s_json_fail(&p, "data", "too many entries");
                s->data = calloc(MAX(n, 1u), sizeof *s->data);
                if (!s->data)
                        return -ENOMEM;
                size_t saved = k8s_json_path_push(&p, "data");
                cJSON_ArrayForEach(e, data) {
                        K8sSecretEntry *d = &s->data[s->n_data];
                        /* Never the value in a message: only the key. */
                        if (!e->string)
                                return k8s_json_fail(&p, NULL, "entry without a key");
                        if (!cJSON_IsString(e) || !e->valuestring)
                                return k8s_json_fail(&p, e->string, "not a string");
                        s->n_data++;
                        d->key = strdup(e->string);
                        if (!d->key)
                                return -ENOMEM;
                        if (k8s_base64_decode(e->valuestring, &d->value, &d->size) < 0)
                                return k8s_json_fail(&p, e->string, "not base64");
                }
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(s);
        return 0;
}

/* --- kinds ------------------------------------------------------------------ */

#define DEFINE_KIND(var, kind_, prefix, plural_, ns, decoder, freer)                                       \
        static int var##_decode(const cJSON *j, void **ret, K8sDecodeError *error) {                      \
                return decoder(j, (void *) ret, error);                                                    \
        }                                                                                                  \
        static void var##_free(void *o) {                                                                  \
                freer(o);                                                                                  \
        }                                                                                                  \
        const K8sKind var = {                                                                              \
                .kind = kind_,                                                                             \
                .api_prefix = prefix,                                                                      \
                .plural = plural_,                                                                         \
                .namespaced = ns,                                                                          \
                .decode = var##_decode,                                                                    \
                .free = var##_free,                                                                        \
        };

DEFINE_KIND(k8s_kind_pod, "Pod", "/api/v1", "pods", true, k8s_pod_from_json, k8s_pod_free)
DEFINE_KIND(k8s_kind_pvc, "PersistentVolumeClaim", "/api/v1", "persistentvolumeclaims", true, k8s_pvc_from_json,
            k8s_pvc_free)
DEFINE_KIND(k8s_kind_pv, "PersistentVolume", "/api/v1", "persistentvolumes", false, k8s_pv_from_json, k8s_pv_free)
DEFINE_KIND(k8s_kind_csidriver, "CSIDriver", "/apis/storage.k8s.io/v1", "csidrivers", false,
            k8s_csidriver_from_json, k8s_csidriver_free)
DEFINE_KIND(k8s_kind_volume_attachment, "VolumeAttachment", "/apis/storage.k8s.io/v1", "volumeattachments", false,
            k8s_volume_attachment_from_json, k8s_volume_attachment_free)
DEFINE_KIND(k8s_kind_node, "Node", "/api/v1", "nodes", false, k8s_node_from_json, k8s_node_free)
DEFINE_KIND(k8s_kind_secret, "Secret", "/api/v1", "secrets", true, k8s_secret_from_json, k8s_secret_free)

int k8s_object_decode(const K8sKind *kind, const char *text, size_t size, void **ret, K8sDecodeError *error) {
        _cleanup_(cJSON_Deletep) cJSON *j = cJSON_ParseWithLength(text, size);
        int r;

        if (!j) {
                if (error) {
                        snprintf(error->field, sizeof error->field, "(json)");
                        error->problem = "not valid JSON";
                }
                return -EBADMSG;
        }
        r = kind->decode(j, ret, error);
        if (kind == &k8s_kind_secret)
                k8s_json_wipe_delete(TAKE_PTR(j));
        return r;
}
