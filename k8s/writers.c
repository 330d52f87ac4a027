/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "k8s/csimigration.h"
#include "k8s/json.h"
#include "k8s/writers.h"
#include "systemd/log.h"
#include "systemd/validate.h"

#define MERGE_PATCH "application/merge-patch+json"
#define JSON "application/json"

/* --- GET ------------------------------------------------------------------ */

typedef struct GetOp {
        const K8sKind *kind;
        k8s_get_done_t done;
        void *userdata;
} GetOp;

static void on_get(K8sClient *c, const K8sResponse *resp, void *userdata) {
        GetOp *op = userdata;
        K8sDecodeError err = {};
        void *obj = NULL;
        _cleanup_free_ char *m = NULL;
        int r;

        if (resp->error < 0 || resp->status != 200)
                op->done(c, resp->error < 0 ? resp->error : -EIO, resp->status, resp->message, NULL, op->userdata);
        else {
                r = k8s_object_decode(op->kind, resp->body, resp->size, &obj, &err);
                if (r < 0) {
                        if (asprintf(&m, "%s from API server %s does not decode: field %s: %s", op->kind->kind,
                                     k8s_client_server(c), err.field, strempty(err.problem)) < 0)
                                m = NULL;
                        log_warning("%s", strempty(m));
                }
                op->done(c, r, resp->status, m, obj, op->userdata);
        }
        free(op);
}

static int object_path(const K8sKind *kind, const char *namespace, const char *name, const char *sub, char **ret) {
        int n;

        /* Names become URL path segments: only what the API could hold. */
        if (validate_dns1123_subdomain(name) < 0 && validate_path_component(name) < 0)
                return -EINVAL;
        if (kind->namespaced) {
                if (validate_dns1123_label(namespace) < 0)
                        return -EINVAL;
                n = asprintf(ret, "%s/namespaces/%s/%s/%s%s%s", kind->api_prefix, namespace, kind->plural, name,
                             sub ? "/" : "", strempty(sub));
        } else
                n = asprintf(ret, "%s/%s/%s%s%s", kind->api_prefix, kind->plural, name, sub ? "/" : "",
                             strempty(sub));
        return n < 0 ? -ENOMEM : 0;
}

int k8s_get_object(K8sClient *c, const K8sKind *kind, const char *namespace, const char *name,
                   k8s_get_done_t done, void *userdata) {
        _cleanup_free_ char *path = NULL, *esc = k8s_escape(strempty(name));
        K8sRequest *req;
        GetOp *op;
        int r;

        if (!esc)
                return -ENOMEM;
        if (!streq(esc, strempty(name)))
                return -EINVAL;
        r = object_path(kind, namespace, name, NULL, &path);
        if (r < 0)
                return r;
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (GetOp) { .kind = kind, .done = done, .userdata = userdata };
        r = k8s_client_request(c, "GET", path, NULL, NULL, on_get, op, &req);
        if (r < 0) {
                free(op);
                return r;
        }
        k8s_request_set_destroy(req, free);
        return 0;
}

/* --- volumesInUse -------------------------------------------------------- */

typedef struct SimpleOp {
        k8s_write_done_t done;
        void *userdata;
} SimpleOp;

static void on_simple(K8sClient *c, const K8sResponse *resp, void *userdata) {
        SimpleOp *op = userdata;
        bool ok = resp->error == 0 && resp->status >= 200 && resp->status < 300;

        if (op->done)
                op->done(c, ok ? 0 : resp->error < 0 ? resp->error : -EIO, ok ? NULL : resp->message, op->userdata);
        free(op);
}

static int simple_request(K8sClient *c, const char *method, const char *path, const char *content_type,
                          const char *body, k8s_write_done_t done, void *userdata) {
        SimpleOp *op = calloc(1, sizeof *op);
        K8sRequest *req;
        int r;

        if (!op)
                return -ENOMEM;
        *op = (SimpleOp) { .done = done, .userdata = userdata };
        r = k8s_client_request(c, method, path, content_type, body, on_simple, op, &req);
        if (r < 0) {
                free(op);
                return r;
        }
        k8s_request_set_destroy(req, free);
        return 0;
}

int k8s_node_patch_volumes_in_use(K8sClient *c, const char *node, char *const *volumes, k8s_write_done_t done,
                                  void *userdata) {
        _cleanup_(cJSON_Deletep) cJSON *patch = cJSON_CreateObject();
        _cleanup_free_ char *path = NULL, *body = NULL;
        cJSON *status, *list;
        int r;

        r = object_path(&k8s_kind_node, NULL, node, "status", &path);
        if (r < 0)
                return r;
        if (!patch || !(status = cJSON_AddObjectToObject(patch, "status")) ||
            !(list = cJSON_AddArrayToObject(status, "volumesInUse")))
                return -ENOMEM;
        for (size_t i = 0; volumes && volumes[i]; i++) {
                cJSON *s = cJSON_CreateString(volumes[i]);
                if (!s || !cJSON_AddItemToArray(list, s)) {
                        cJSON_Delete(s);
                        return -ENOMEM;
                }
        }
        body = cJSON_PrintUnformatted(patch);
        if (!body)
                return -ENOMEM;
        return simple_request(c, "PATCH", path, MERGE_PATCH, body, done, userdata);
}

/* --- node annotations ------------------------------------------------------ */

int k8s_node_id_annotation_update(const char *old, const char *driver, const char *node_id, char **ret) {
        _cleanup_(cJSON_Deletep) cJSON *map = old ? cJSON_Parse(old) : NULL;
        cJSON *cur;
        bool changed = false;

        *ret = NULL;
        if (!cJSON_IsObject(map)) {
                cJSON_Delete(map);
                map = cJSON_CreateObject();
                if (!map)
                        return -ENOMEM;
                changed = old != NULL;
        }
        cur = cJSON_GetObjectItemCaseSensitive(map, driver);
        /* A driver named twice (a hand edit): readers disagree on which entry
         * counts (cJSON the first, Go the last), so all go and one is written. */
        size_t n_entries = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, map)
                if (e->string && streq(e->string, driver))
                        n_entries++;
        if (node_id) {
                if (n_entries != 1 || !cJSON_IsString(cur) || !streq(cur->valuestring, node_id)) {
                        while (cJSON_GetObjectItemCaseSensitive(map, driver))
                                cJSON_DeleteItemFromObjectCaseSensitive(map, driver);
                        if (!cJSON_AddStringToObject(map, driver, node_id))
                                return -ENOMEM;
                        changed = true;
                }
        } else if (cur) {
                while (cJSON_GetObjectItemCaseSensitive(map, driver))
                        cJSON_DeleteItemFromObjectCaseSensitive(map, driver);
                changed = true;
        }
        if (cJSON_GetArraySize(map) == 0)
                return changed ? 1 : 0; /* *ret NULL: remove the annotation */
        *ret = cJSON_PrintUnformatted(map);
        if (!*ret)
                return -ENOMEM;
        return changed ? 1 : 0;
}

typedef enum OpKind {
        OP_NODE_ID,
        OP_CSINODE,
        OP_LABELS,
} OpKind;

typedef enum OpStep {
        STEP_GET,
        STEP_WRITE,
        STEP_GET_NODE, /* CSINode missing: the Node's UID for the owner reference */
        STEP_CREATE,
} OpStep;

typedef struct RmwOp {
        K8sClient *client;
        OpKind kind;
        OpStep step;
        char *node;
        char *node_uid; /* OP_CSINODE: the owner the CSINode must name; NULL: whatever it names */
        char *driver;
        char *node_id;
        char **topology_keys;
        K8sStringMap add, remove; /* OP_LABELS */
        int64_t allocatable_count;
        unsigned attempts;
        k8s_write_done_t done;
        void *userdata;
} RmwOp;

static void rmw_free(void *p) {
        RmwOp *op = p;
        if (!op)
                return;
        free(op->node);
        free(op->node_uid);
        k8s_string_map_done(&op->add);
        k8s_string_map_done(&op->remove);
        free(op->driver);
        free(op->node_id);
        k8s_strv_free(op->topology_keys);
        free(op);
}

static void rmw_finish(RmwOp *op, int error, const char *message) {
        if (op->done)
                op->done(op->client, error, message, op->userdata);
        rmw_free(op);
}

static void on_rmw(K8sClient *c, const K8sResponse *resp, void *userdata);

static int rmw_send_raw(RmwOp *op, OpStep step, const char *method, const char *path, const char *content_type,
                        const char *body) {
        K8sRequest *req;
        int r;

        op->step = step;
        r = k8s_client_request(op->client, method, path, content_type, body, on_rmw, op, &req);
        if (r < 0)
                return r;
        k8s_request_set_destroy(req, rmw_free);
        return 0;
}

static void rmw_send(RmwOp *op, OpStep step, const char *method, const char *path, const char *content_type,
                     const char *body) {
        int r = rmw_send_raw(op, step, method, path, content_type, body);
        if (r < 0)
                rmw_finish(op, r, "cannot start a request to the API server");
}

static int rmw_get_raw(RmwOp *op) {
        _cleanup_free_ char *path = NULL;

        if (++op->attempts > K8S_WRITE_ATTEMPTS)
                return -EBUSY;
        if (op->kind == OP_NODE_ID || op->kind == OP_LABELS)
                (void) object_path(&k8s_kind_node, NULL, op->node, NULL, &path);
        else if (asprintf(&path, "/apis/storage.k8s.io/v1/csinodes/%s", op->node) < 0)
                path = NULL;
        if (!path)
                return -ENOMEM;
        return rmw_send_raw(op, STEP_GET, "GET", path, NULL, NULL);
}

static void rmw_get(RmwOp *op) {
        int r = rmw_get_raw(op);
        if (r == -EBUSY)
                rmw_finish(op, r, "gave up after repeated 409 Conflict answers");
        else if (r < 0)
                rmw_finish(op, r, "cannot start a request to the API server");
}

static void node_id_write(RmwOp *op, cJSON *node) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(node, "metadata");
        const cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(ann, K8S_ANNOTATION_NODE_ID);
        const cJSON *managed = cJSON_GetObjectItemCaseSensitive(ann, K8S_ANNOTATION_CONTROLLER_MANAGED);
        _cleanup_(cJSON_Deletep) cJSON *patch = cJSON_CreateObject();
        _cleanup_free_ char *value = NULL, *body = NULL, *path = NULL;
        cJSON *pmd, *pann;
        bool changed = false;
        int r = 0;

        if (!patch || !(pmd = cJSON_AddObjectToObject(patch, "metadata")) ||
            !(pann = cJSON_AddObjectToObject(pmd, "annotations"))) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        if (op->driver) {
                r = k8s_node_id_annotation_update(cJSON_IsString(old) ? old->valuestring : NULL, op->driver,
                                                  op->node_id, &value);
                if (r < 0) {
                        rmw_finish(op, r, NULL);
                        return;
                }
                if (r > 0) {
                        changed = true;
                        if (value ? !cJSON_AddStringToObject(pann, K8S_ANNOTATION_NODE_ID, value)
                                  : !cJSON_AddNullToObject(pann, K8S_ANNOTATION_NODE_ID)) {
                                rmw_finish(op, -ENOMEM, NULL);
                                return;
                        }
                }
        }
        if (!cJSON_IsString(managed) || !streq(managed->valuestring, "true")) {
                changed = true;
                if (!cJSON_AddStringToObject(pann, K8S_ANNOTATION_CONTROLLER_MANAGED, "true")) {
                        rmw_finish(op, -ENOMEM, NULL);
                        return;
                }
        }
        if (!changed) {
                rmw_finish(op, 0, NULL);
                return;
        }
        /* The resourceVersion makes the merge patch conditional: a 409 means
         * someone else changed the annotation meanwhile, so read it again. */
        if (cJSON_IsString(rv) && !cJSON_AddStringToObject(pmd, "resourceVersion", rv->valuestring)) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        body = cJSON_PrintUnformatted(patch);
        if (!body || object_path(&k8s_kind_node, NULL, op->node, NULL, &path) < 0) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        rmw_send(op, STEP_WRITE, "PATCH", path, MERGE_PATCH, body);
}

static cJSON *csinode_driver_entry(const char *driver, const char *node_id, char *const *topology_keys,
                                   int64_t allocatable_count) {
        cJSON *e = cJSON_CreateObject(), *keys;
        size_t n = k8s_strv_length(topology_keys);
        _cleanup_free_ char **sorted = NULL;

        if (!e || !cJSON_AddStringToObject(e, "name", driver) || !cJSON_AddStringToObject(e, "nodeID", node_id))
                goto fail;
        /* kubelet sorts the topology keys. */
        keys = cJSON_AddArrayToObject(e, "topologyKeys");
        if (!keys)
                goto fail;
        if (n > 0) {
                sorted = calloc(n, sizeof(char *));
                if (!sorted)
                        goto fail;
                memcpy(sorted, topology_keys, n * sizeof(char *));
                for (size_t i = 1; i < n; i++)
                        for (size_t k = i; k > 0 && strcmp(sorted[k - 1], sorted[k]) > 0; k--) {
                                char *t = sorted[k];
                                sorted[k] = sorted[k - 1];
                                sorted[k - 1] = t;
                        }
                for (size_t i = 0; i < n; i++)
                        if (!cJSON_AddItemToArray(keys, cJSON_CreateString(sorted[i])))
                                goto fail;
        }
        if (allocatable_count > 0) {
                cJSON *alloc = cJSON_AddObjectToObject(e, "allocatable");
                if (!alloc || !cJSON_AddNumberToObject(alloc, "count",
                                                       (double) MIN(allocatable_count, (int64_t) INT32_MAX)))
                        goto fail;
        }
        return e;
fail:
        cJSON_Delete(e);
        return NULL;
}

int k8s_csinode_update_drivers(cJSON *csinode, const char *driver, const char *node_id, char *const *topology_keys,
                               int64_t allocatable_count) {
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(csinode, "spec"), *drivers, *e, *found = NULL;
        int index = 0, found_index = -1;

        if (!cJSON_IsObject(spec)) {
                cJSON_DeleteItemFromObjectCaseSensitive(csinode, "spec");
                spec = cJSON_AddObjectToObject(csinode, "spec");
                if (!spec)
                        return -ENOMEM;
        }
        drivers = cJSON_GetObjectItemCaseSensitive(spec, "drivers");
        if (!cJSON_IsArray(drivers)) {
                cJSON_DeleteItemFromObjectCaseSensitive(spec, "drivers");
                drivers = cJSON_AddArrayToObject(spec, "drivers");
                if (!drivers)
                        return -ENOMEM;
        }
        cJSON_ArrayForEach(e, drivers) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(name) && streq(name->valuestring, driver)) {
                        found = e;
                        found_index = index;
                        break;
                }
                index++;
        }
        if (!node_id) {
                if (!found)
                        return 0;
                cJSON_DeleteItemFromArray(drivers, found_index);
                return 1;
        }
        cJSON *entry = csinode_driver_entry(driver, node_id, topology_keys, allocatable_count);
        if (!entry)
                return -ENOMEM;
        if (found) {
                if (cJSON_Compare(found, entry, true)) {
                        cJSON_Delete(entry);
                        return 0;
                }
                if (!cJSON_ReplaceItemInArray(drivers, found_index, entry)) {
                        cJSON_Delete(entry);
                        return -ENOMEM;
                }
                return 1;
        }
        if (!cJSON_AddItemToArray(drivers, entry)) {
                cJSON_Delete(entry);
                return -ENOMEM;
        }
        return 1;
}

/* The sorted, distinct members of a migrated-plugins value ("a,b"), joined
 * again: two values name the same set when these are equal. */
static int plugins_normalize(const char *value, char **ret) {
        _cleanup_free_ char *copy = strdup(value);
        _cleanup_free_ char **parts = NULL;
        size_t n = 0, size = 1;
        char *p, *save = NULL;

        if (!copy || !(parts = calloc(strlen(value) / 2 + 2, sizeof(char *))))
                return -ENOMEM;
        for (p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                size_t k = n;
                while (k > 0 && strcmp(parts[k - 1], p) > 0) {
                        parts[k] = parts[k - 1];
                        k--;
                }
                if (k > 0 && streq(parts[k - 1], p)) {
                        memmove(&parts[k], &parts[k + 1], (n - k) * sizeof(char *));
                        continue;
                }
                parts[k] = p;
                n++;
                size += strlen(p) + 1;
        }
        *ret = malloc(size);
        if (!*ret)
                return -ENOMEM;
        p = *ret;
        *p = '\0';
        for (size_t i = 0; i < n; i++)
                p = stpcpy(stpcpy(p, i == 0 ? "" : ","), parts[i]);
        return 0;
}

int k8s_csinode_update_migrated_plugins(cJSON *csinode) {
        const cJSON *drivers = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(csinode, "spec"),
                                                                "drivers");
        cJSON *md = cJSON_GetObjectItemCaseSensitive(csinode, "metadata"), *ann, *e;
        _cleanup_free_ char *value = NULL, *old_set = NULL;
        _cleanup_free_ char **names = NULL;
        const cJSON *old;
        size_t n = 0;
        int r;

        if (!cJSON_IsObject(md))
                return 0;
        names = calloc(cJSON_GetArraySize(drivers) + 1, sizeof(char *));
        if (!names)
                return -ENOMEM;
        if (!cJSON_IsArray(drivers))
                drivers = NULL;
        cJSON_ArrayForEach(e, drivers) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(name))
                        names[n++] = name->valuestring;
        }
        r = k8s_csi_migrated_plugins_annotation(names, &value);
        if (r < 0)
                return r;
        ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
        old = cJSON_IsObject(ann) ? cJSON_GetObjectItemCaseSensitive(ann, K8S_MIGRATED_PLUGINS_ANNOTATION) : NULL;
        /* setMigrationAnnotation compares sets: the same plugins in another
         * order is no change.  An existing "" (what kvolumed wrote before)
         * is removed, where kubelet would leave it: none is "no key". */
        if (cJSON_IsString(old)) {
                r = plugins_normalize(old->valuestring, &old_set);
                if (r < 0)
                        return r;
                if (value && streq(old_set, value))
                        return 0;
        } else if (!value)
                return 0;
        if (!value) {
                cJSON_DeleteItemFromObjectCaseSensitive(ann, K8S_MIGRATED_PLUGINS_ANNOTATION);
                return 1;
        }
        if (!cJSON_IsObject(ann)) {
                cJSON_DeleteItemFromObjectCaseSensitive(md, "annotations");
                ann = cJSON_AddObjectToObject(md, "annotations");
                if (!ann)
                        return -ENOMEM;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ann, K8S_MIGRATED_PLUGINS_ANNOTATION);
        if (!cJSON_AddStringToObject(ann, K8S_MIGRATED_PLUGINS_ANNOTATION, value))
                return -ENOMEM;
        return 1;
}

/* Points the CSINode's Node owner reference at the Node with "uid"; 1 when changed. */
static int csinode_fix_owner(cJSON *csinode, const char *node, const char *uid) {
        cJSON *md = cJSON_GetObjectItemCaseSensitive(csinode, "metadata"), *refs, *ref;
        int index = 0;

        if (!cJSON_IsObject(md))
                return 0;
        refs = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
        if (!cJSON_IsArray(refs))
                refs = NULL;
        cJSON_ArrayForEach(ref, refs) {
                const cJSON *kind = cJSON_GetObjectItemCaseSensitive(ref, "kind");
                const cJSON *ref_uid = cJSON_GetObjectItemCaseSensitive(ref, "uid");
                if (cJSON_IsString(kind) && streq(kind->valuestring, "Node")) {
                        if (cJSON_IsString(ref_uid) && streq(ref_uid->valuestring, uid))
                                return 0;
                        cJSON_DeleteItemFromArray(refs, index);
                        break;
                }
                index++;
        }
        if (!refs) {
                cJSON_DeleteItemFromObjectCaseSensitive(md, "ownerReferences");
                refs = cJSON_AddArrayToObject(md, "ownerReferences");
        }
        if (!refs || !(ref = cJSON_CreateObject()))
                return -ENOMEM;
        if (!cJSON_AddItemToArray(refs, ref) || !cJSON_AddStringToObject(ref, "apiVersion", "v1") ||
            !cJSON_AddStringToObject(ref, "kind", "Node") || !cJSON_AddStringToObject(ref, "name", node) ||
            !cJSON_AddStringToObject(ref, "uid", uid))
                return -ENOMEM;
        return 1;
}

static void csinode_write(RmwOp *op, cJSON *csinode) {
        _cleanup_free_ char *body = NULL, *path = NULL;
        int r, owner = 0;

        if (op->node_uid && op->node_id) {
                owner = csinode_fix_owner(csinode, op->node, op->node_uid);
                if (owner < 0) {
                        rmw_finish(op, owner, NULL);
                        return;
                }
        }
        r = k8s_csinode_update_drivers(csinode, op->driver, op->node_id, op->topology_keys, op->allocatable_count);
        if (r >= 0 && owner > 0)
                r = 1;
        if (r >= 0) {
                /* The registered drivers may have changed: kubelet's
                 * migrated-plugins annotation follows them. */
                int a = k8s_csinode_update_migrated_plugins(csinode);
                r = a < 0 ? a : MAX(r, a);
        }
        if (r <= 0) {
                rmw_finish(op, r, NULL);
                return;
        }
        body = cJSON_PrintUnformatted(csinode); /* carries resourceVersion: a conditional update */
        if (!body || asprintf(&path, "/apis/storage.k8s.io/v1/csinodes/%s", op->node) < 0) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        rmw_send(op, STEP_WRITE, "PUT", path, JSON, body);
}

static void csinode_create(RmwOp *op, cJSON *node) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(node, "metadata");
        const cJSON *uid = cJSON_GetObjectItemCaseSensitive(md, "uid");
        _cleanup_(cJSON_Deletep) cJSON *obj = cJSON_CreateObject();
        _cleanup_free_ char *body = NULL;
        cJSON *omd, *refs, *ref;

        if (!cJSON_IsString(uid)) {
                rmw_finish(op, -EBADMSG, "Node has no metadata.uid");
                return;
        }
        if (!obj || !cJSON_AddStringToObject(obj, "apiVersion", "storage.k8s.io/v1") ||
            !cJSON_AddStringToObject(obj, "kind", "CSINode") || !(omd = cJSON_AddObjectToObject(obj, "metadata")) ||
            !cJSON_AddStringToObject(omd, "name", op->node) ||
            !(refs = cJSON_AddArrayToObject(omd, "ownerReferences")) || !(ref = cJSON_CreateObject()) ||
            !cJSON_AddItemToArray(refs, ref) || !cJSON_AddStringToObject(ref, "apiVersion", "v1") ||
            !cJSON_AddStringToObject(ref, "kind", "Node") || !cJSON_AddStringToObject(ref, "name", op->node) ||
            !cJSON_AddStringToObject(ref, "uid", uid->valuestring)) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        /* CreateCSINode sets the annotation; none: no key, never "". */
        if (k8s_csinode_update_drivers(obj, op->driver, op->node_id, op->topology_keys, op->allocatable_count) < 0 ||
            k8s_csinode_update_migrated_plugins(obj) < 0 || !(body = cJSON_PrintUnformatted(obj))) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        rmw_send(op, STEP_CREATE, "POST", "/apis/storage.k8s.io/v1/csinodes", JSON, body);
}

static void labels_write(RmwOp *op, cJSON *node) {
        _cleanup_(cJSON_Deletep) cJSON *patch = NULL;
        _cleanup_free_ char *message = NULL, *body = NULL, *path = NULL;
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(node, "metadata");
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        cJSON *pmd;
        int r;

        r = k8s_node_labels_patch(node, &op->add, &op->remove, &patch, &message);
        if (r <= 0) {
                rmw_finish(op, r, message);
                return;
        }
        /* Conditional on what was read: a 409 reads again, so that a label
         * someone set meanwhile is seen (and collides) rather than overwritten. */
        pmd = cJSON_GetObjectItemCaseSensitive(patch, "metadata");
        if (cJSON_IsString(rv) && !cJSON_AddStringToObject(pmd, "resourceVersion", rv->valuestring)) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        body = cJSON_PrintUnformatted(patch);
        if (!body || object_path(&k8s_kind_node, NULL, op->node, NULL, &path) < 0) {
                rmw_finish(op, -ENOMEM, NULL);
                return;
        }
        rmw_send(op, STEP_WRITE, "PATCH", path, MERGE_PATCH, body);
}

static void on_rmw(K8sClient *c, const K8sResponse *resp, void *userdata) {
        RmwOp *op = userdata;
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        _cleanup_free_ char *path = NULL;

        if (resp->error < 0) {
                rmw_finish(op, resp->error, resp->message);
                return;
        }
        switch (op->step) {
        case STEP_GET:
                if (resp->status == 404 && op->kind == OP_CSINODE) {
                        if (!op->node_id) {
                                rmw_finish(op, 0, NULL); /* nothing to remove */
                                return;
                        }
                        if (object_path(&k8s_kind_node, NULL, op->node, NULL, &path) < 0) {
                                rmw_finish(op, -ENOMEM, NULL);
                                return;
                        }
                        rmw_send(op, STEP_GET_NODE, "GET", path, NULL, NULL);
                        return;
                }
                if (resp->status != 200) {
                        rmw_finish(op, -EIO, resp->message);
                        return;
                }
                j = cJSON_ParseWithLength(resp->body, resp->size);
                if (!cJSON_IsObject(j)) {
                        rmw_finish(op, -EBADMSG, "the API server's answer is not a JSON object");
                        return;
                }
                if (op->kind == OP_NODE_ID)
                        node_id_write(op, j);
                else if (op->kind == OP_LABELS)
                        labels_write(op, j);
                else
                        csinode_write(op, j);
                return;
        case STEP_GET_NODE:
                if (resp->status != 200) {
                        rmw_finish(op, -EIO, resp->message);
                        return;
                }
                j = cJSON_ParseWithLength(resp->body, resp->size);
                csinode_create(op, j);
                return;
        case STEP_WRITE:
        case STEP_CREATE:
                if (resp->status == 409) {
                        /* Someone else wrote first (or created it): start over from a fresh read. */
                        rmw_get(op);
                        return;
                }
                if (resp->status < 200 || resp->status >= 300) {
                        rmw_finish(op, -EIO, resp->message);
                        return;
                }
                rmw_finish(op, 0, NULL);
                return;
        }
}

static int string_map_copy(const K8sStringMap *from, K8sStringMap *to) {
        size_t n = from ? from->n : 0;

        *to = (K8sStringMap){};
        if (n == 0)
                return 0;
        to->keys = calloc(n, sizeof(char *));
        to->values = calloc(n, sizeof(char *));
        if (!to->keys || !to->values)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                to->keys[i] = strdup(from->keys[i]);
                to->values[i] = strdup(from->values[i]);
                to->n++;
                if (!to->keys[i] || !to->values[i])
                        return -ENOMEM;
        }
        return 0;
}

static int rmw_start_op(K8sClient *c, OpKind kind, const char *node, const char *node_uid, const char *driver,
                        const char *node_id, char *const *topology_keys, int64_t allocatable_count,
                        const K8sStringMap *add, const K8sStringMap *remove, k8s_write_done_t done,
                        void *userdata) {
        RmwOp *op;

        if (validate_dns1123_subdomain(node) < 0)
                return -EINVAL;
        if (driver && validate_csi_driver_name(driver) < 0)
                return -EINVAL;
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (RmwOp) { .client = c, .kind = kind, .allocatable_count = allocatable_count, .done = done,
                        .userdata = userdata };
        if (!(op->node = strdup(node)) || (driver && !(op->driver = strdup(driver))) ||
            (node_id && !(op->node_id = strdup(node_id))) || (node_uid && !(op->node_uid = strdup(node_uid))) ||
            string_map_copy(add, &op->add) < 0 || string_map_copy(remove, &op->remove) < 0) {
                rmw_free(op);
                return -ENOMEM;
        }
        for (size_t i = 0; topology_keys && topology_keys[i]; i++) {
                char **v = realloc(op->topology_keys, (i + 2) * sizeof(char *));
                if (!v) {
                        rmw_free(op);
                        return -ENOMEM;
                }
                op->topology_keys = v;
                v[i + 1] = NULL;
                if (!(v[i] = strdup(topology_keys[i]))) {
                        rmw_free(op);
                        return -ENOMEM;
                }
        }
        int r = rmw_get_raw(op); /* the callback comes later, from the loop */
        if (r < 0)
                rmw_free(op);
        return r;
}

int k8s_node_set_driver_id(K8sClient *c, const char *node, const char *driver, const char *node_id,
                           k8s_write_done_t done, void *userdata) {
        return rmw_start_op(c, OP_NODE_ID, node, NULL, driver, node_id, NULL, 0, NULL, NULL, done, userdata);
}

int k8s_csinode_set_driver(K8sClient *c, const char *node, const char *driver, const char *node_id,
                           char *const *topology_keys, int64_t allocatable_count, k8s_write_done_t done,
                           void *userdata) {
        return k8s_csinode_set_driver_owned(c, node, NULL, driver, node_id, topology_keys, allocatable_count, done,
                                            userdata);
}

int k8s_csinode_set_driver_owned(K8sClient *c, const char *node, const char *node_uid, const char *driver,
                                 const char *node_id, char *const *topology_keys, int64_t allocatable_count,
                                 k8s_write_done_t done, void *userdata) {
        if (!driver)
                return -EINVAL;
        return rmw_start_op(c, OP_CSINODE, node, node_uid, driver, node_id, topology_keys, allocatable_count, NULL,
                            NULL, done, userdata);
}

/* --- node labels ------------------------------------------------------------- */

/* kubelet's own labels (k8s.io/kubelet/pkg/apis well_known_labels.go,
 * IsKubeletLabel), which NodeRestriction lets a node set on itself. */
static const char *const kubelet_labels[] = {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
};
static const char *const kubelet_label_namespaces[] = { "kubelet.kubernetes.io", "node.kubernetes.io" };

/* Whether namespace "ns" (of length n) is "domain" or a subdomain of it. */
static bool in_domain(const char *ns, size_t n, const char *domain) {
        size_t d = strlen(domain);
        return (n == d && strncmp(ns, domain, n) == 0) ||
               (n > d && ns[n - d - 1] == '.' && strncmp(ns + n - d, domain, d) == 0);
}

bool k8s_node_label_is_kubelet_label(const char *key) {
        const char *slash = key ? strchr(key, '/') : NULL;

        if (!key)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(kubelet_labels); i++)
                if (streq(key, kubelet_labels[i]))
                        return true;
        for (size_t i = 0; slash && i < ELEMENTSOF(kubelet_label_namespaces); i++)
                if (in_domain(key, slash - key, kubelet_label_namespaces[i]))
                        return true;
        return false;
}

static bool label_name_valid(const char *s, size_t n, bool may_be_empty) {
        if (n == 0)
                return may_be_empty;
        if (n > 63 || !isalnum((unsigned char) s[0]) || !isalnum((unsigned char) s[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) s[i]) && !strchr("-_.", s[i]))
                        return false;
        return true;
}

int k8s_validate_label(const char *key, const char *value) {
        const char *slash;

        if (!key || !value)
                return -EINVAL;
        slash = strchr(key, '/');
        if (slash) {
                _cleanup_free_ char *prefix = strndup(key, slash - key);
                if (!prefix)
                        return -ENOMEM;
                if (validate_dns1123_subdomain(prefix) < 0)
                        return -EINVAL;
                key = slash + 1;
        }
        if (!label_name_valid(key, strlen(key), false) || !label_name_valid(value, strlen(value), true))
                return -EINVAL;
        return 0;
}

bool k8s_node_label_allowed(const char *key) {
        const char *slash = key ? strchr(key, '/') : NULL;
        size_t n;

        if (!key || k8s_validate_label(key, "") < 0)
                return false;
        if (!slash)
                return true;
        n = slash - key;
        if (!in_domain(key, n, "kubernetes.io") && !in_domain(key, n, "k8s.io"))
                return true;
        return k8s_node_label_is_kubelet_label(key);
}

int k8s_node_labels_patch(const cJSON *node, const K8sStringMap *add, const K8sStringMap *remove, cJSON **ret,
                          char **ret_message) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(node, "metadata");
        const cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
        _cleanup_(cJSON_Deletep) cJSON *patch = cJSON_CreateObject();
        cJSON *pmd, *plabels;
        bool changed = false;

        *ret = NULL;
        *ret_message = NULL;
        if (!patch || !(pmd = cJSON_AddObjectToObject(patch, "metadata")) ||
            !(plabels = cJSON_AddObjectToObject(pmd, "labels")))
                return -ENOMEM;
        for (size_t i = 0; add && i < add->n; i++) {
                const cJSON *cur = cJSON_GetObjectItemCaseSensitive(labels, add->keys[i]);
                if (k8s_validate_label(add->keys[i], add->values[i]) < 0) {
                        if (asprintf(ret_message, "invalid label %s=%s", add->keys[i], add->values[i]) < 0)
                                *ret_message = NULL;
                        return -EINVAL;
                }
                if (!k8s_node_label_allowed(add->keys[i])) {
                        if (asprintf(ret_message,
                                     "label %s is in the kubernetes.io/k8s.io namespaces, which NodeRestriction "
                                     "forbids a node to set on itself",
                                     add->keys[i]) < 0)
                                *ret_message = NULL;
                        return -EPERM;
                }
                if (cJSON_IsString(cur) && streq(cur->valuestring, add->values[i]))
                        continue;
                if (cur && !cJSON_IsNull(cur)) {
                        /* kubelet's words (nodeinfomanager.go updateTopologyLabels). */
                        if (asprintf(ret_message,
                                     "detected topology value collision: driver reported %s:%s but existing "
                                     "label is %s:%s",
                                     add->keys[i], add->values[i], add->keys[i],
                                     cJSON_IsString(cur) ? cur->valuestring : "(not a string)") < 0)
                                *ret_message = NULL;
                        return -EEXIST;
                }
                if (!cJSON_AddStringToObject(plabels, add->keys[i], add->values[i]))
                        return -ENOMEM;
                changed = true;
        }
        for (size_t i = 0; remove && i < remove->n; i++) {
                const cJSON *cur = cJSON_GetObjectItemCaseSensitive(labels, remove->keys[i]);
                if (!k8s_node_label_allowed(remove->keys[i])) {
                        if (asprintf(ret_message,
                                     "label %s is in the kubernetes.io/k8s.io namespaces, which NodeRestriction "
                                     "forbids a node to remove from itself",
                                     remove->keys[i]) < 0)
                                *ret_message = NULL;
                        return -EPERM;
                }
                /* Someone else's value now: not ours to remove. */
                if (!cJSON_IsString(cur) || !streq(cur->valuestring, remove->values[i]))
                        continue;
                if (add && k8s_string_map_get(add, remove->keys[i]))
                        continue; /* also added: adding wins */
                if (!cJSON_AddNullToObject(plabels, remove->keys[i]))
                        return -ENOMEM;
                changed = true;
        }
        if (!changed)
                return 0;
        *ret = TAKE_PTR(patch);
        return 1;
}

int k8s_node_update_labels(K8sClient *c, const char *node, const K8sStringMap *add, const K8sStringMap *remove,
                           k8s_write_done_t done, void *userdata) {
        const K8sStringMap *maps[] = { add, remove };

        /* Refused here, before any request: the API server would refuse the
         * whole patch, and the reason belongs in our log. */
        for (size_t m = 0; m < ELEMENTSOF(maps); m++)
                for (size_t i = 0; maps[m] && i < maps[m]->n; i++)
                        if (!k8s_node_label_allowed(maps[m]->keys[i])) {
                                log_warning("Not labelling node %s with %s: %s", node, maps[m]->keys[i],
                                            k8s_validate_label(maps[m]->keys[i], "") < 0
                                                    ? "not a valid label key"
                                                    : "a key in the kubernetes.io/k8s.io namespaces outside "
                                                      "kubelet's own labels, which NodeRestriction forbids a "
                                                      "node to change on itself");
                                return -EPERM;
                        }
        if ((!add || add->n == 0) && (!remove || remove->n == 0))
                return -EINVAL;
        return rmw_start_op(c, OP_LABELS, node, NULL, NULL, NULL, NULL, 0, add, remove, done, userdata);
}

/* --- service account tokens (TokenRequest) ---------------------------------- */

typedef struct TokenOp {
        k8s_token_done_t done;
        void *userdata;
} TokenOp;

/* The token is a credential: every copy of it this file makes (the parsed
 * tree) is overwritten before it is freed; the request's response buffer is
 * wiped by the client. */
static void on_token(K8sClient *c, const K8sResponse *resp, void *userdata) {
        TokenOp *op = userdata;
        cJSON *j = NULL;
        const cJSON *status, *token, *expiration;
        char *token_copy = NULL, *expiration_copy = NULL;
        _cleanup_free_ char *m = NULL;
        int r = 0;

        if (resp->error < 0 || resp->status < 200 || resp->status >= 300) {
                op->done(c, resp->error < 0 ? resp->error : resp->status == 403 ? -EACCES : -EIO, resp->message,
                         NULL, NULL, op->userdata);
                free(op);
                return;
        }
        j = cJSON_ParseWithLength(resp->body, resp->size);
        status = j ? cJSON_GetObjectItemCaseSensitive(j, "status") : NULL;
        token = status ? cJSON_GetObjectItemCaseSensitive(status, "token") : NULL;
        expiration = status ? cJSON_GetObjectItemCaseSensitive(status, "expirationTimestamp") : NULL;
        if (!cJSON_IsString(token) || isempty(token->valuestring) || !cJSON_IsString(expiration) ||
            isempty(expiration->valuestring)) {
                /* Never the body in the message: it may hold the token. */
                r = -EBADMSG;
                if (asprintf(&m, "TokenRequest from API server %s has no status.token and "
                             "status.expirationTimestamp", k8s_client_server(c)) < 0)
                        m = NULL;
        } else if (!(token_copy = strdup(token->valuestring)) ||
                   !(expiration_copy = strdup(expiration->valuestring))) {
                free(token_copy);
                token_copy = NULL;
                r = -ENOMEM;
        }
        k8s_json_wipe_delete(j);
        op->done(c, r, r < 0 ? (m ?: "out of memory") : NULL, token_copy, expiration_copy, op->userdata);
        free(op);
}

int k8s_request_token(K8sClient *c, const char *namespace, const char *service_account, const char *audience,
                      int64_t expiration_seconds, const char *pod_name, const char *pod_uid, k8s_token_done_t done,
                      void *userdata, K8sRequest **ret) {
        _cleanup_(cJSON_Deletep) cJSON *body = cJSON_CreateObject();
        _cleanup_free_ char *path = NULL, *text = NULL;
        cJSON *spec, *audiences, *ref;
        K8sRequest *req;
        TokenOp *op;
        int r;

        /* Each becomes a URL path segment or is checked by NodeRestriction. */
        if (validate_dns1123_label(namespace) < 0 || validate_dns1123_subdomain(service_account) < 0 ||
            validate_dns1123_subdomain(pod_name) < 0 || isempty(pod_uid) || !done)
                return -EINVAL;
        if (asprintf(&path, "/api/v1/namespaces/%s/serviceaccounts/%s/token", namespace, service_account) < 0)
                return -ENOMEM;
        if (!body || !cJSON_AddStringToObject(body, "apiVersion", "authentication.k8s.io/v1") ||
            !cJSON_AddStringToObject(body, "kind", "TokenRequest") ||
            !(spec = cJSON_AddObjectToObject(body, "spec")) ||
            !(audiences = cJSON_AddArrayToObject(spec, "audiences")))
                return -ENOMEM;
        /* kubelet: an empty audience means none, i.e. the API server's own. */
        if (!isempty(audience)) {
                cJSON *a = cJSON_CreateString(audience);
                if (!a || !cJSON_AddItemToArray(audiences, a)) {
                        cJSON_Delete(a);
                        return -ENOMEM;
                }
        }
        if (expiration_seconds > 0 && !cJSON_AddNumberToObject(spec, "expirationSeconds", (double) expiration_seconds))
                return -ENOMEM;
        /* NodeRestriction refuses a node's TokenRequest not bound to one of its pods. */
        if (!(ref = cJSON_AddObjectToObject(spec, "boundObjectRef")) ||
            !cJSON_AddStringToObject(ref, "apiVersion", "v1") || !cJSON_AddStringToObject(ref, "kind", "Pod") ||
            !cJSON_AddStringToObject(ref, "name", pod_name) || !cJSON_AddStringToObject(ref, "uid", pod_uid))
                return -ENOMEM;
        text = cJSON_PrintUnformatted(body);
        if (!text)
                return -ENOMEM;
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (TokenOp) { .done = done, .userdata = userdata };
        r = k8s_client_request(c, "POST", path, JSON, text, on_token, op, &req);
        if (r < 0) {
                free(op);
                return r;
        }
        k8s_request_set_destroy(req, free);
        if (ret)
                *ret = req;
        return 0;
}

/* --- PVC resize status --------------------------------------------------------- */

static bool is_resize_condition(const char *type) {
        /* kubelet's knownResizeConditions */
        return streq(type, "Resizing") || streq(type, "FileSystemResizePending") ||
               streq(type, "ControllerResizeError") || streq(type, "NodeResizeError");
}

int k8s_pvc_resize_patch(const cJSON *pvc, const K8sPvcResizeUpdate *u, const char *now, cJSON **ret) {
        _cleanup_(cJSON_Deletep) cJSON *patch = cJSON_CreateObject();
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(pvc, "metadata");
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(pvc, "status");
        const cJSON *statuses = cJSON_GetObjectItemCaseSensitive(status, "allocatedResourceStatuses");
        const cJSON *conditions = cJSON_GetObjectItemCaseSensitive(status, "conditions");
        const cJSON *c;
        cJSON *pmd, *pstatus, *map, *list;
        bool has_error = false, conditions_change = false, others = false;

        if (!patch || !(pmd = cJSON_AddObjectToObject(patch, "metadata")) ||
            !(pstatus = cJSON_AddObjectToObject(patch, "status")))
                return -ENOMEM;
        /* Conditional: kubelet's addResourceVersion, a write over what it read only. */
        if (cJSON_IsString(rv) && !cJSON_AddStringToObject(pmd, "resourceVersion", rv->valuestring))
                return -ENOMEM;

        cJSON_ArrayForEach(c, statuses)
                if (!streq_ptr(c->string, "storage"))
                        others = true;
        if (u->resize_status) {
                if (!(map = cJSON_AddObjectToObject(pstatus, "allocatedResourceStatuses")) ||
                    !cJSON_AddStringToObject(map, "storage", u->resize_status))
                        return -ENOMEM;
        } else if (others) {
                if (!(map = cJSON_AddObjectToObject(pstatus, "allocatedResourceStatuses")) ||
                    !cJSON_AddNullToObject(map, "storage"))
                        return -ENOMEM;
        } else if (statuses && !cJSON_AddNullToObject(pstatus, "allocatedResourceStatuses"))
                return -ENOMEM;

        if (u->capacity && (!(map = cJSON_AddObjectToObject(pstatus, "capacity")) ||
                            !cJSON_AddStringToObject(map, "storage", u->capacity)))
                return -ENOMEM;

        /* kubelet's MergeResizeConditionOnPVC: other conditions stay; a merge
         * patch replaces the whole list, so it carries them. */
        list = cJSON_CreateArray();
        if (!list)
                return -ENOMEM;
        cJSON_ArrayForEach(c, conditions) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
                const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
                if (t && is_resize_condition(t)) {
                        if (u->clear_resize_conditions) {
                                conditions_change = true;
                                continue;
                        }
                        has_error = has_error || streq(t, "NodeResizeError");
                }
                cJSON *copy = cJSON_Duplicate(c, true);
                if (!copy || !cJSON_AddItemToArray(list, copy)) {
                        cJSON_Delete(copy);
                        cJSON_Delete(list);
                        return -ENOMEM;
                }
        }
        if (u->error && !has_error) {
                _cleanup_free_ char *message = NULL;
                cJSON *cond = cJSON_CreateObject();
                if (!cond || !cJSON_AddItemToArray(list, cond) ||
                    asprintf(&message, "failed to expand pvc with %s", u->error) < 0 ||
                    !cJSON_AddStringToObject(cond, "type", "NodeResizeError") ||
                    !cJSON_AddStringToObject(cond, "status", "True") ||
                    !cJSON_AddStringToObject(cond, "lastTransitionTime", now) ||
                    !cJSON_AddStringToObject(cond, "message", message)) {
                        cJSON_Delete(list);
                        return -ENOMEM;
                }
                conditions_change = true;
        }
        if (conditions_change)
                cJSON_AddItemToObject(pstatus, "conditions", list);
        else
                cJSON_Delete(list);
        *ret = TAKE_PTR(patch);
        return 0;
}

typedef struct PvcStatusOp {
        K8sClient *client;
        char *path;     /* the claim */
        char *resize_status, *capacity, *error;
        bool clear_resize_conditions;
        bool writing;
        unsigned attempts;
        k8s_write_done_t done;
        void *userdata;
} PvcStatusOp;

static void pvc_status_free(void *p) {
        PvcStatusOp *op = p;
        if (!op)
                return;
        free(op->path);
        free(op->resize_status);
        free(op->capacity);
        free(op->error);
        free(op);
}

static void on_pvc_status(K8sClient *c, const K8sResponse *resp, void *userdata);

/* A request started: its callback owns the op (a cancel would free it). */
static int pvc_status_send(PvcStatusOp *op, const char *method, const char *path, const char *body) {
        K8sRequest *req;
        int r;

        op->writing = body != NULL;
        r = k8s_client_request(op->client, method, path, body ? MERGE_PATCH : NULL, body, on_pvc_status, op, &req);
        if (r < 0)
                return r;
        k8s_request_set_destroy(req, pvc_status_free);
        return 0;
}

static int pvc_status_read(PvcStatusOp *op) {
        if (++op->attempts > K8S_WRITE_ATTEMPTS)
                return -EBUSY;
        return pvc_status_send(op, "GET", op->path, NULL);
}

static void pvc_status_finish(PvcStatusOp *op, int error, const char *message) {
        if (op->done)
                op->done(op->client, error, message, op->userdata);
        pvc_status_free(op);
}

static void on_pvc_status(K8sClient *c, const K8sResponse *resp, void *userdata) {
        PvcStatusOp *op = userdata;
        _cleanup_(cJSON_Deletep) cJSON *j = NULL, *patch = NULL;
        _cleanup_free_ char *body = NULL, *path = NULL;
        char now[32];
        time_t t = time(NULL);
        struct tm tm;
        int r;

        if (resp->error < 0 || (resp->status != 200 && !(op->writing && resp->status == 409))) {
                pvc_status_finish(op, resp->error < 0 ? resp->error : resp->status == 403 ? -EACCES : -EIO,
                                  resp->message);
                return;
        }
        if (op->writing) {
                if (resp->status == 200) {
                        pvc_status_finish(op, 0, NULL);
                        return;
                }
                /* 409: someone wrote first; read again and patch what is there now. */
                r = pvc_status_read(op);
                if (r < 0)
                        pvc_status_finish(op, r, r == -EBUSY ? "gave up after repeated 409 Conflict answers"
                                                             : "cannot start a request to the API server");
                return;
        }
        j = cJSON_ParseWithLength(resp->body, resp->size);
        strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        r = cJSON_IsObject(j) ? k8s_pvc_resize_patch(j,
                                                     &(K8sPvcResizeUpdate){
                                                             .resize_status = op->resize_status,
                                                             .capacity = op->capacity,
                                                             .error = op->error,
                                                             .clear_resize_conditions = op->clear_resize_conditions },
                                                     now, &patch)
                              : -EBADMSG;
        if (r >= 0 && (!(body = cJSON_PrintUnformatted(patch)) || asprintf(&path, "%s/status", op->path) < 0))
                r = -ENOMEM;
        if (r >= 0)
                r = pvc_status_send(op, "PATCH", path, body);
        if (r < 0)
                pvc_status_finish(op, r, r == -EBADMSG ? "the API server's answer is not a JSON object"
                                                       : "cannot start a request to the API server");
}

int k8s_pvc_patch_resize_status(K8sClient *c, const char *namespace, const char *name, const K8sPvcResizeUpdate *u,
                                k8s_write_done_t done, void *userdata) {
        PvcStatusOp *op;
        int r;

        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (PvcStatusOp){ .client = c, .clear_resize_conditions = u->clear_resize_conditions, .done = done,
                             .userdata = userdata };
        r = object_path(&k8s_kind_pvc, namespace, name, NULL, &op->path);
        if (r >= 0 && ((u->resize_status && !(op->resize_status = strdup(u->resize_status))) ||
                       (u->capacity && !(op->capacity = strdup(u->capacity))) ||
                       (u->error && !(op->error = strdup(u->error)))))
                r = -ENOMEM;
        if (r >= 0)
                r = pvc_status_read(op);
        if (r < 0)
                pvc_status_free(op);
        return r;
}
