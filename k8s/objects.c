/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "k8s/objects-internal.h"
#include "k8s/objects.h"
#include "systemd/validate.h"

/* Runs "body" for each element of array "arr" with the path extended by
 * "key[i]"; "e" is the element and "i" its index. */
#define FOREACH_ELEMENT(p, key, arr, e, i)                                                                 \
        for (size_t _saved = k8s_json_path_push(p, key), i = 0, _once = 1; _once; _once = 0, k8s_json_path_pop(p, _saved)) \
                for (const cJSON *e = (arr) ? (arr)->child : NULL; e; e = e->next, i++)

void k8s_meta_done(K8sMeta *m) {
        free(m->uid);
        free(m->namespace);
        free(m->name);
        free(m->resource_version);
        free(m->deletion_timestamp);
        free(m->controller_kind);
        free(m->controller_uid);
}

int k8s_object_decode_start(JsonPath *p, const cJSON *j, K8sDecodeError *error, size_t size, void **ret) {
        void *v;

        k8s_json_path_init(p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(p, NULL, "not an object");
        v = calloc(1, size);
        if (!v)
                return -ENOMEM;
        *ret = v;
        return 0;
}

int k8s_json_get_array_alloc(JsonPath *p, const cJSON *obj, const char *key, size_t elem_size, const cJSON **ret_a,
                             size_t *ret_n, void **ret) {
        void *v;

        TRY(k8s_json_get_array(p, obj, key, JSON_OPTIONAL, ret_a, ret_n));
        if (*ret_n == 0)
                return 0;
        v = calloc(*ret_n, elem_size);
        if (!v)
                return -ENOMEM;
        *ret = v;
        return 0;
}

int k8s_meta_decode(JsonPath *p, const cJSON *j, bool need_uid, K8sMeta *m) {
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
                        free(c[i].mounts[k].sub_path);
                        free(c[i].mounts[k].sub_path_expr);
                        free(c[i].mounts[k].mount_propagation);
                        free(c[i].mounts[k].recursive_read_only);
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
                k8s_env_free(c[i].env, c[i].n_env);
                k8s_env_from_free(c[i].env_from, c[i].n_env_from);
                k8s_string_map_done(&c[i].limits);
                k8s_string_map_done(&c[i].requests);
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
        k8s_meta_done(&p->meta);
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
                k8s_key_projection_free(p->volumes[i].config_map);
                k8s_key_projection_free(p->volumes[i].secret);
                k8s_downward_api_free(p->volumes[i].downward_api);
                k8s_projected_free(p->volumes[i].projected);
                k8s_empty_dir_free(p->volumes[i].empty_dir);
                k8s_host_path_free(p->volumes[i].host_path);
                k8s_in_tree_source_free(p->volumes[i].in_tree);
                free(p->volumes[i].other_source);
        }
        free(p->supplemental_groups);
        k8s_string_map_done(&p->labels);
        k8s_string_map_done(&p->annotations);
        free(p->pod_ip);
        k8s_strv_free(p->pod_ips);
        free(p->host_ip);
        k8s_strv_free(p->host_ips);
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

/* The sources kvolumed sets up itself besides CSI and claims. */
static int pod_volume_sources_decode(JsonPath *p, const cJSON *j, K8sPodVolume *v) {
        const cJSON *o;

#define SOURCE(key, call) DECODE_OPTIONAL_OBJECT(p, j, key, o, call)
        SOURCE("configMap", k8s_key_projection_decode(p, o, "name", true, &v->config_map));
        SOURCE("secret", k8s_key_projection_decode(p, o, "secretName", true, &v->secret));
        SOURCE("downwardAPI", k8s_downward_api_decode(p, o, true, &v->downward_api));
        SOURCE("projected", k8s_projected_decode(p, o, &v->projected));
        SOURCE("emptyDir", k8s_empty_dir_decode(p, o, &v->empty_dir));
        SOURCE("hostPath", k8s_host_path_decode(p, o, &v->host_path));
#undef SOURCE
        return 0;
}

const char *k8s_pod_volume_source(const K8sPodVolume *v) {
        return v->csi ? "csi" : v->claim_name ? "persistentVolumeClaim" : v->ephemeral ? "ephemeral"
                : v->config_map ? "configMap" : v->secret ? "secret" : v->downward_api ? "downwardAPI"
                : v->projected ? "projected" : v->empty_dir ? "emptyDir" : v->host_path ? "hostPath"
                : v->in_tree ? k8s_in_tree_source_key(v->in_tree->kind) : v->other_source;
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
                DECODE_OPTIONAL_OBJECT(p, o, "nodePublishSecretRef", ref,
                                       k8s_json_get_string(p, ref, "name", JSON_REQUIRED,
                                                           &v->csi->node_publish_secret_name));
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

        TRY(pod_volume_sources_decode(p, j, v));
        TRY(k8s_in_tree_source_decode(p, j, true, &v->in_tree));
        const char *other = k8s_other_volume_source(j, true);
        if (other && !(v->other_source = strdup(other)))
                return -ENOMEM;
        return 0;
}

/* subPath, subPathExpr, mountPropagation and recursiveReadOnly of a
 * volumeMount; k8s_volume_mount_validate() checks their values. */
static int mount_extras_decode(JsonPath *p, const cJSON *e, K8sVolumeMount *m) {

        TRY(k8s_json_get_string(p, e, "subPath", JSON_OPTIONAL, &m->sub_path));
        TRY(k8s_json_get_string(p, e, "subPathExpr", JSON_OPTIONAL, &m->sub_path_expr));
        /* "" is the same as unset for both. */
        if (m->sub_path && !m->sub_path[0]) {
                free(m->sub_path);
                m->sub_path = NULL;
        }
        if (m->sub_path_expr && !m->sub_path_expr[0]) {
                free(m->sub_path_expr);
                m->sub_path_expr = NULL;
        }
        TRY(k8s_json_get_string(p, e, "mountPropagation", JSON_OPTIONAL, &m->mount_propagation));
        TRY(k8s_json_get_string(p, e, "recursiveReadOnly", JSON_OPTIONAL, &m->recursive_read_only));
        return 0;
}

static int mounts_decode(JsonPath *p, const cJSON *j, const char *key, const char *path_key,
                         K8sVolumeMount **ret, size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, j, key, &a, &n, *ret));
        if (n == 0)
                return 0;
        FOREACH_ELEMENT(p, key, a, e, i) {
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "name", JSON_REQUIRED, &(*ret)[i].name));
                TRY(k8s_json_get_string(p, e, path_key, JSON_REQUIRED, &(*ret)[i].path));
                TRY(k8s_json_get_bool(p, e, "readOnly", false, &(*ret)[i].read_only));
                if (streq(path_key, "mountPath"))
                        TRY(mount_extras_decode(p, e, &(*ret)[i]));
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
        TRY(k8s_json_get_bool(p, sc, "privileged", false, &c->privileged));
        TRY(k8s_json_get_int(p, sc, "runAsUser", 0, INT32_MAX, &c->has_run_as_user, &c->run_as_user));
        TRY(k8s_json_get_int(p, sc, "runAsGroup", 0, INT32_MAX, &c->has_run_as_group, &c->run_as_group));
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

static int container_resources_decode(JsonPath *p, const cJSON *container, K8sContainer *c) {
        const cJSON *res;

        TRY(k8s_json_get_object(p, container, "resources", JSON_OPTIONAL, &res));
        if (!res)
                return 0;
        size_t saved = k8s_json_path_push(p, "resources");
        TRY(k8s_json_get_string_map(p, res, "limits", &c->limits));
        TRY(k8s_json_get_string_map(p, res, "requests", &c->requests));
        k8s_json_path_pop(p, saved);
        return 0;
}

static int containers_decode(JsonPath *p, const cJSON *spec, const char *key, K8sContainer **ret,
                             size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, spec, key, &a, &n, *ret));
        if (n == 0)
                return 0;
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
                TRY(k8s_env_decode(p, e, &c->env, &c->n_env));
                TRY(k8s_env_from_decode(p, e, &c->env_from, &c->n_env_from));
                TRY(container_resources_decode(p, e, c));
                k8s_json_path_pop(p, s2);
        }
        return 0;
}

static int statuses_decode(JsonPath *p, const cJSON *status, const char *key, K8sContainerStatus **ret,
                           size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, status, key, &a, &n, *ret));
        if (n == 0)
                return 0;
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

static int supplemental_groups_decode(JsonPath *p, const cJSON *sc, K8sPod *pod) {
        const cJSON *a;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, sc, "supplementalGroups", &a, &n, pod->supplemental_groups));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, "supplementalGroups");
        size_t i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                /* k8s_json_get_int reads a key: wrap the element. */
                if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > (double) UINT32_MAX ||
                    e->valuedouble != (double) (int64_t) e->valuedouble) {
                        (void) k8s_json_path_push_index(p, i);
                        return k8s_json_fail(p, NULL, "not a group ID");
                }
                pod->supplemental_groups[pod->n_supplemental_groups++] = (int64_t) e->valuedouble;
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

/* status.podIPs / hostIPs: [{"ip": ...}] as a NULL-terminated vector. */
static int ips_decode(JsonPath *p, const cJSON *status, const char *key, char ***ret) {
        const cJSON *a;
        size_t n;

        TRY(k8s_json_get_array(p, status, key, JSON_OPTIONAL, &a, &n));
        if (n == 0)
                return 0;
        if (!(*ret = calloc(n + 1, sizeof(char *))))
                return -ENOMEM;
        size_t saved = k8s_json_path_push(p, key), i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                TRY(k8s_json_get_string(p, e, "ip", JSON_REQUIRED, &(*ret)[i]));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

/* metadata.labels/annotations and status.podIP(s)/hostIP(s): what the
 * downward API and subPathExpr may read. */
static int pod_extras_decode(JsonPath *p, const cJSON *j, K8sPod *pod) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "metadata"), *status;

        size_t saved = k8s_json_path_push(p, "metadata");
        TRY(k8s_json_get_string_map(p, md, "labels", &pod->labels));
        TRY(k8s_json_get_string_map(p, md, "annotations", &pod->annotations));
        k8s_json_path_pop(p, saved);
        TRY(k8s_json_get_object(p, j, "status", JSON_OPTIONAL, &status));
        if (!status)
                return 0;
        saved = k8s_json_path_push(p, "status");
        TRY(k8s_json_get_string(p, status, "podIP", JSON_OPTIONAL, &pod->pod_ip));
        TRY(k8s_json_get_string(p, status, "hostIP", JSON_OPTIONAL, &pod->host_ip));
        TRY(ips_decode(p, status, "podIPs", &pod->pod_ips));
        TRY(ips_decode(p, status, "hostIPs", &pod->host_ips));
        k8s_json_path_pop(p, saved);
        return 0;
}

int k8s_pod_from_json(const cJSON *j, K8sPod **ret, K8sDecodeError *error) {
        _cleanup_(k8s_pod_freep) K8sPod *pod = NULL;
        const cJSON *spec, *status, *sc, *a;
        JsonPath p;
        size_t n;

        TRY(OBJECT_DECODE_START(&p, j, error, pod));
        TRY(k8s_meta_decode(&p, j, true, &pod->meta));

        TRY(k8s_json_get_object(&p, j, "spec", JSON_REQUIRED, &spec));
        size_t saved = k8s_json_path_push(&p, "spec");
        TRY(k8s_json_get_string(&p, spec, "nodeName", JSON_OPTIONAL, &pod->node_name));
        TRY(k8s_json_get_string(&p, spec, "serviceAccountName", JSON_OPTIONAL, &pod->service_account_name));
        TRY(k8s_json_get_object(&p, spec, "securityContext", JSON_OPTIONAL, &sc));
        if (sc) {
                size_t s2 = k8s_json_path_push(&p, "securityContext");
                TRY(k8s_json_get_int(&p, sc, "fsGroup", 0, UINT32_MAX, &pod->has_fs_group, &pod->fs_group));
                TRY(k8s_json_get_int(&p, sc, "runAsUser", 0, INT32_MAX, &pod->has_run_as_user, &pod->run_as_user));
                TRY(k8s_json_get_int(&p, sc, "runAsGroup", 0, INT32_MAX, &pod->has_run_as_group,
                                     &pod->run_as_group));
                TRY(supplemental_groups_decode(&p, sc, pod));
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
        TRY(pod_extras_decode(&p, j, pod));
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
        k8s_meta_done(&c->meta);
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

        TRY(OBJECT_DECODE_START(&p, j, error, c));
        TRY(k8s_meta_decode(&p, j, true, &c->meta));
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
        k8s_meta_done(&v->meta);
        pv_csi_free(v->csi);
        free(v->volume_mode);
        k8s_strv_free(v->mount_options);
        k8s_strv_free(v->access_modes);
        free(v->claim_namespace);
        free(v->claim_name);
        free(v->claim_uid);
        free(v->phase);
        free(v->capacity);
        k8s_host_path_free(v->host_path);
        free(v->local_path);
        free(v->local_fs_type);
        k8s_node_selector_terms_free(v->node_affinity, v->n_node_affinity);
        k8s_in_tree_source_free(v->in_tree);
        free(v->other_source);
        k8s_string_map_done(&v->labels);
        free(v->gid_annotation);
        free(v->azure_file_resource_group);
        free(v);
        return NULL;
}

int k8s_pv_from_json(const cJSON *j, K8sPersistentVolume **ret, K8sDecodeError *error) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *v = NULL;
        const cJSON *spec, *status, *o;
        JsonPath p;

        TRY(OBJECT_DECODE_START(&p, j, error, v));
        TRY(k8s_meta_decode(&p, j, true, &v->meta));
        TRY(k8s_pv_metadata_decode(&p, j, v));
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
        TRY(k8s_pv_sources_decode(&p, spec, v));
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
        k8s_meta_done(&d->meta);
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

        TRY(OBJECT_DECODE_START(&p, j, error, d));
        TRY(k8s_meta_decode(&p, j, false, &d->meta));
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
        k8s_meta_done(&va->meta);
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

        TRY(OBJECT_DECODE_START(&p, j, error, va));
        TRY(k8s_meta_decode(&p, j, false, &va->meta));
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
        k8s_meta_done(&n->meta);
        k8s_string_map_done(&n->annotations);
        k8s_string_map_done(&n->labels);
        for (size_t i = 0; i < n->n_volumes_attached; i++) {
                free(n->volumes_attached[i].name);
                free(n->volumes_attached[i].device_path);
        }
        free(n->volumes_attached);
        k8s_strv_free(n->volumes_in_use);
        k8s_string_map_done(&n->allocatable);
        k8s_string_map_done(&n->capacity);
        free(n);
        return NULL;
}

int k8s_node_from_json(const cJSON *j, K8sNode **ret, K8sDecodeError *error) {
        _cleanup_(k8s_node_freep) K8sNode *node = NULL;
        const cJSON *md, *status, *a;
        JsonPath p;
        size_t n;

        TRY(OBJECT_DECODE_START(&p, j, error, node));
        TRY(k8s_meta_decode(&p, j, true, &node->meta));
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
                TRY(k8s_json_get_string_map(&p, status, "allocatable", &node->allocatable));
                TRY(k8s_json_get_string_map(&p, status, "capacity", &node->capacity));
                k8s_json_path_pop(&p, saved);
        }
        *ret = TAKE_PTR(node);
        return 0;
}

/* --- Secret ---------------------------------------------------------------- */

K8sSecret *k8s_secret_free(K8sSecret *s) {
        if (!s)
                return NULL;
        k8s_meta_done(&s->meta);
        free(s->type);
        k8s_bytes_map_free(s->data, s->n_data);
        free(s);
        return NULL;
}

const K8sSecretEntry *k8s_secret_get(const K8sSecret *s, const char *key) {
        return k8s_bytes_map_get(s->data, s->n_data, key);
}

int k8s_secret_from_json(const cJSON *j, K8sSecret **ret, K8sDecodeError *error) {
        _cleanup_(k8s_secret_freep) K8sSecret *s = NULL;
        JsonPath p;

        TRY(OBJECT_DECODE_START(&p, j, error, s));
        TRY(k8s_meta_decode(&p, j, false, &s->meta));
        TRY(k8s_json_get_string(&p, j, "type", JSON_OPTIONAL, &s->type));
        TRY(k8s_json_get_bool(&p, j, "immutable", false, &s->immutable));
        TRY(k8s_bytes_map_decode(&p, j, "data", &s->data, &s->n_data));
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
DEFINE_KIND(k8s_kind_configmap, "ConfigMap", "/api/v1", "configmaps", true, k8s_configmap_from_json,
            k8s_configmap_free)

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
