/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/objects-internal.h"
#include "k8s/objects-volumes.h"
#include "k8s/quantity.h"
#include "systemd/macro.h"

/* Allocates *ret zeroed, ELEMENTSOF-safe for n == 0. */
static int strdup_default(char **s, const char *def) {
        if (*s)
                return 0;
        *s = strdup(def);
        return *s ? 0 : -ENOMEM;
}

/* A file mode as API validation takes it: 0 to 0777. */
static int get_mode(JsonPath *p, const cJSON *o, const char *key, bool *ret_present, int64_t *ret) {
        return k8s_json_get_int(p, o, key, 0, 0777, ret_present, ret);
}

static int get_default_mode(JsonPath *p, const cJSON *o, bool volume, int64_t *ret) {
        bool present = false;

        TRY(get_mode(p, o, "defaultMode", &present, ret));
        if (!present)
                *ret = volume ? K8S_DEFAULT_VOLUME_MODE : 0;
        return 0;
}

/* --- selectors shared with env -------------------------------------------- */

void k8s_field_ref_free(K8sFieldRef *f) {
        if (!f)
                return;
        free(f->field_path);
        free(f->api_version);
        free(f);
}

int k8s_field_ref_decode(JsonPath *p, const cJSON *o, K8sFieldRef **ret) {
        K8sFieldRef *f = calloc(1, sizeof *f);

        if (!f)
                return -ENOMEM;
        *ret = f;
        TRY(k8s_json_get_string(p, o, "fieldPath", JSON_REQUIRED, &f->field_path));
        TRY(k8s_json_get_string(p, o, "apiVersion", JSON_OPTIONAL, &f->api_version));
        return strdup_default(&f->api_version, "v1");
}

void k8s_resource_field_ref_free(K8sResourceFieldRef *r) {
        if (!r)
                return;
        free(r->container_name);
        free(r->resource);
        free(r->divisor);
        free(r);
}

int k8s_resource_field_ref_decode(JsonPath *p, const cJSON *o, K8sResourceFieldRef **ret) {
        K8sResourceFieldRef *r = calloc(1, sizeof *r);
        int64_t v;

        if (!r)
                return -ENOMEM;
        *ret = r;
        TRY(k8s_json_get_string(p, o, "containerName", JSON_OPTIONAL, &r->container_name));
        TRY(k8s_json_get_string(p, o, "resource", JSON_REQUIRED, &r->resource));
        TRY(k8s_json_get_string(p, o, "divisor", JSON_OPTIONAL, &r->divisor));
        TRY(strdup_default(&r->divisor, "1"));
        /* A CPU divisor ("1m") counts in milli-units; a memory one ("1Ei")
         * may not fit in them (-ERANGE), but it is still a quantity. */
        if (k8s_quantity_parse_milli(r->divisor, &v) == -EINVAL)
                return k8s_json_fail(p, "divisor", "not a quantity");
        return 0;
}

/* --- configMap and secret ---------------------------------------------------- */

void k8s_key_projection_free(K8sKeyProjection *k) {
        if (!k)
                return;
        free(k->name);
        for (size_t i = 0; i < k->n_items; i++) {
                free(k->items[i].key);
                free(k->items[i].path);
        }
        free(k->items);
        free(k);
}

int k8s_key_projection_decode(JsonPath *p, const cJSON *o, const char *name_key, bool volume,
                              K8sKeyProjection **ret) {
        K8sKeyProjection *k = calloc(1, sizeof *k);
        const cJSON *a;
        size_t n;

        if (!k)
                return -ENOMEM;
        *ret = k;
        TRY(k8s_json_get_string(p, o, name_key, JSON_OPTIONAL, &k->name));
        TRY(k8s_json_get_bool(p, o, "optional", false, &k->optional));
        if (volume)
                TRY(get_default_mode(p, o, true, &k->default_mode));
        TRY(GET_ARRAY_ALLOC(p, o, "items", &a, &n, k->items));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, "items");
        size_t i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                K8sKeyToPath *it = &k->items[i];
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                k->n_items++;
                TRY(k8s_json_get_string(p, e, "key", JSON_REQUIRED, &it->key));
                TRY(k8s_json_get_string(p, e, "path", JSON_REQUIRED, &it->path));
                TRY(get_mode(p, e, "mode", &it->has_mode, &it->mode));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

/* --- downwardAPI ---------------------------------------------------------------- */

void k8s_downward_api_free(K8sDownwardAPIProjection *d) {
        if (!d)
                return;
        for (size_t i = 0; i < d->n_items; i++) {
                free(d->items[i].path);
                k8s_field_ref_free(d->items[i].field_ref);
                k8s_resource_field_ref_free(d->items[i].resource_field_ref);
        }
        free(d->items);
        free(d);
}

int k8s_downward_api_decode(JsonPath *p, const cJSON *o, bool volume, K8sDownwardAPIProjection **ret) {
        K8sDownwardAPIProjection *d = calloc(1, sizeof *d);
        const cJSON *a, *ref;
        size_t n;

        if (!d)
                return -ENOMEM;
        *ret = d;
        if (volume)
                TRY(get_default_mode(p, o, true, &d->default_mode));
        TRY(GET_ARRAY_ALLOC(p, o, "items", &a, &n, d->items));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, "items");
        size_t i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                K8sDownwardAPIFile *f = &d->items[i];
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                d->n_items++;
                TRY(k8s_json_get_string(p, e, "path", JSON_REQUIRED, &f->path));
                TRY(get_mode(p, e, "mode", &f->has_mode, &f->mode));
                DECODE_OPTIONAL_OBJECT(p, e, "fieldRef", ref, k8s_field_ref_decode(p, ref, &f->field_ref));
                DECODE_OPTIONAL_OBJECT(p, e, "resourceFieldRef", ref,
                                       k8s_resource_field_ref_decode(p, ref, &f->resource_field_ref));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

/* --- projected ----------------------------------------------------------------- */

static void token_free(K8sServiceAccountTokenProjection *t) {
        if (!t)
                return;
        free(t->audience);
        free(t->path);
        free(t);
}

static int token_decode(JsonPath *p, const cJSON *o, K8sServiceAccountTokenProjection **ret) {
        K8sServiceAccountTokenProjection *t = calloc(1, sizeof *t);
        bool present;

        if (!t)
                return -ENOMEM;
        *ret = t;
        TRY(k8s_json_get_string(p, o, "audience", JSON_OPTIONAL, &t->audience));
        TRY(k8s_json_get_string(p, o, "path", JSON_REQUIRED, &t->path));
        /* API validation wants [600, 2^32]: k8s_pod_volume_validate() checks it. */
        TRY(k8s_json_get_int(p, o, "expirationSeconds", 0, INT64_MAX, &present, &t->expiration_seconds));
        if (!present)
                t->expiration_seconds = K8S_DEFAULT_TOKEN_EXPIRATION_SECONDS;
        return 0;
}

static void ctb_free(K8sClusterTrustBundleProjection *b) {
        if (!b)
                return;
        free(b->name);
        free(b->signer_name);
        free(b->label_selector);
        free(b->path);
        free(b);
}

/* Appends one requirement to a selector string, comma-separated. */
static int append(char **s, const char *prefix, const char *key, const char *infix, const char *values,
                  const char *suffix) {
        char *n;
        if (asprintf(&n, "%s%s%s%s%s%s%s", *s, (*s)[0] ? "," : "", prefix, key, infix, values, suffix) < 0)
                return -ENOMEM;
        free(*s);
        *s = n;
        return 0;
}

/* metav1.LabelSelector → its selector string, as LabelSelectorAsSelector. */
static int label_selector_decode(JsonPath *p, const cJSON *o, char **ret, bool *ret_invalid) {
        _cleanup_(k8s_string_map_done) K8sStringMap labels = {};
        const cJSON *a;
        size_t n;

        if (!(*ret = strdup("")))
                return -ENOMEM;
        TRY(k8s_json_get_string_map(p, o, "matchLabels", &labels));
        for (size_t i = 0; i < labels.n; i++)
                TRY(append(ret, "", labels.keys[i], "=", labels.values[i], ""));
        TRY(k8s_json_get_array(p, o, "matchExpressions", JSON_OPTIONAL, &a, &n));
        size_t saved = k8s_json_path_push(p, "matchExpressions");
        size_t i = 0;
        for (const cJSON *e = a ? a->child : NULL; e; e = e->next, i++) {
                _cleanup_free_ char *key = NULL, *op = NULL, *values = NULL;
                _cleanup_(strv_freep) char **v = NULL;
                size_t s2 = k8s_json_path_push_index(p, i);

                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                TRY(k8s_json_get_string(p, e, "key", JSON_REQUIRED, &key));
                TRY(k8s_json_get_string(p, e, "operator", JSON_REQUIRED, &op));
                TRY(k8s_json_get_strv(p, e, "values", &v));
                if (!(values = strdup("")))
                        return -ENOMEM;
                for (char **s = v; s && *s; s++) {
                        char *nv;
                        if (asprintf(&nv, "%s%s%s", values, values[0] ? "," : "", *s) < 0)
                                return -ENOMEM;
                        free(values);
                        values = nv;
                }
                /* What LabelSelectorAsSelector refuses makes the selector
                 * invalid, not the pod undecodable. */
                if ((streq(op, "In") || streq(op, "NotIn")) && strv_length(v) > 0)
                        TRY(append(ret, "", key, streq(op, "In") ? " in (" : " notin (", values, ")"));
                else if ((streq(op, "Exists") || streq(op, "DoesNotExist")) && strv_length(v) == 0)
                        TRY(append(ret, streq(op, "Exists") ? "" : "!", key, "", "", ""));
                else
                        *ret_invalid = true;
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

static int ctb_decode(JsonPath *p, const cJSON *o, K8sClusterTrustBundleProjection **ret) {
        K8sClusterTrustBundleProjection *b = calloc(1, sizeof *b);
        const cJSON *sel;

        if (!b)
                return -ENOMEM;
        *ret = b;
        TRY(k8s_json_get_string(p, o, "name", JSON_OPTIONAL, &b->name));
        TRY(k8s_json_get_string(p, o, "signerName", JSON_OPTIONAL, &b->signer_name));
        TRY(k8s_json_get_bool(p, o, "optional", false, &b->optional));
        TRY(k8s_json_get_string(p, o, "path", JSON_REQUIRED, &b->path));
        TRY(k8s_json_get_object(p, o, "labelSelector", JSON_OPTIONAL, &sel));
        if (sel) {
                size_t s2 = k8s_json_path_push(p, "labelSelector");
                b->has_label_selector = true;
                TRY(label_selector_decode(p, sel, &b->label_selector, &b->label_selector_invalid));
                k8s_json_path_pop(p, s2);
        }
        return 0;
}

static void projection_done(K8sVolumeProjection *s) {
        k8s_key_projection_free(s->config_map);
        k8s_key_projection_free(s->secret);
        k8s_downward_api_free(s->downward_api);
        token_free(s->service_account_token);
        ctb_free(s->cluster_trust_bundle);
        free(s->other);
}

void k8s_projected_free(K8sProjectedSource *s) {
        if (!s)
                return;
        for (size_t i = 0; i < s->n_sources; i++)
                projection_done(&s->sources[i]);
        free(s->sources);
        free(s);
}

/* A valid pod has exactly one member per source; all that are there are
 * kept, and k8s_pod_volume_validate() says what is wrong. */
static int projection_decode(JsonPath *p, const cJSON *e, K8sVolumeProjection *s) {
        static const char *const known[] = { "configMap", "secret", "downwardAPI", "serviceAccountToken",
                                             "clusterTrustBundle" };
        const cJSON *o;

#define MEMBER(key, call) DECODE_OPTIONAL_OBJECT(p, e, key, o, call)
        MEMBER("configMap", k8s_key_projection_decode(p, o, "name", false, &s->config_map));
        MEMBER("secret", k8s_key_projection_decode(p, o, "name", false, &s->secret));
        MEMBER("downwardAPI", k8s_downward_api_decode(p, o, false, &s->downward_api));
        MEMBER("serviceAccountToken", token_decode(p, o, &s->service_account_token));
        MEMBER("clusterTrustBundle", ctb_decode(p, o, &s->cluster_trust_bundle));
#undef MEMBER
        /* A source of a newer API (podCertificate, ...): named, not dropped. */
        for (const cJSON *c = e->child; c; c = c->next) {
                bool k = false;
                if (!c->string || cJSON_IsNull(c))
                        continue;
                for (size_t i = 0; i < ELEMENTSOF(known); i++)
                        k = k || streq(c->string, known[i]);
                if (!k) {
                        s->other = strdup(c->string);
                        return s->other ? 0 : -ENOMEM;
                }
        }
        return 0;
}

int k8s_projected_decode(JsonPath *p, const cJSON *o, K8sProjectedSource **ret) {
        K8sProjectedSource *s = calloc(1, sizeof *s);
        const cJSON *a;
        size_t n;

        if (!s)
                return -ENOMEM;
        *ret = s;
        TRY(get_default_mode(p, o, true, &s->default_mode));
        TRY(GET_ARRAY_ALLOC(p, o, "sources", &a, &n, s->sources));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, "sources");
        size_t i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                s->n_sources++;
                TRY(projection_decode(p, e, &s->sources[i]));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

/* --- emptyDir, hostPath ---------------------------------------------------------- */

void k8s_empty_dir_free(K8sEmptyDirSource *e) {
        if (!e)
                return;
        free(e->medium);
        free(e->size_limit);
        free(e);
}

int k8s_empty_dir_decode(JsonPath *p, const cJSON *o, K8sEmptyDirSource **ret) {
        K8sEmptyDirSource *e = calloc(1, sizeof *e);
        int r;

        if (!e)
                return -ENOMEM;
        *ret = e;
        TRY(k8s_json_get_string(p, o, "medium", JSON_OPTIONAL, &e->medium));
        TRY(strdup_default(&e->medium, ""));
        TRY(k8s_json_get_string(p, o, "sizeLimit", JSON_OPTIONAL, &e->size_limit));
        if (e->size_limit) {
                r = k8s_quantity_parse(e->size_limit, &e->size_limit_bytes);
                if (r == -ERANGE)
                        return k8s_json_fail(p, "sizeLimit", "negative or beyond 2^63");
                if (r < 0)
                        return k8s_json_fail(p, "sizeLimit", "not a quantity");
        }
        return 0;
}

void k8s_host_path_free(K8sHostPathSource *h) {
        if (!h)
                return;
        free(h->path);
        free(h->type);
        free(h);
}

int k8s_host_path_decode(JsonPath *p, const cJSON *o, K8sHostPathSource **ret) {
        K8sHostPathSource *h = calloc(1, sizeof *h);

        if (!h)
                return -ENOMEM;
        *ret = h;
        TRY(k8s_json_get_string(p, o, "path", JSON_REQUIRED, &h->path));
        TRY(k8s_json_get_string(p, o, "type", JSON_OPTIONAL, &h->type));
        return strdup_default(&h->type, "");
}

/* --- env ------------------------------------------------------------------------- */

static void key_selector_free(K8sKeySelector *k) {
        if (!k)
                return;
        free(k->name);
        free(k->key);
        free(k);
}

void k8s_env_free(K8sEnvVar *env, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(env[i].name);
                free(env[i].value);
                k8s_field_ref_free(env[i].field_ref);
                k8s_resource_field_ref_free(env[i].resource_field_ref);
                key_selector_free(env[i].config_map_key_ref);
                key_selector_free(env[i].secret_key_ref);
        }
        free(env);
}

static int key_selector_decode(JsonPath *p, const cJSON *vf, const char *key, K8sKeySelector **ret) {
        const cJSON *o;

        TRY(k8s_json_get_object(p, vf, key, JSON_OPTIONAL, &o));
        if (!o)
                return 0;
        size_t saved = k8s_json_path_push(p, key);
        if (!(*ret = calloc(1, sizeof **ret)))
                return -ENOMEM;
        TRY(k8s_json_get_string(p, o, "name", JSON_OPTIONAL, &(*ret)->name));
        TRY(k8s_json_get_string(p, o, "key", JSON_REQUIRED, &(*ret)->key));
        TRY(k8s_json_get_bool(p, o, "optional", false, &(*ret)->optional));
        k8s_json_path_pop(p, saved);
        return 0;
}

int k8s_env_decode(JsonPath *p, const cJSON *container, K8sEnvVar **ret, size_t *ret_n) {
        const cJSON *a, *vf, *o;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, container, "env", &a, &n, *ret));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, "env");
        size_t i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                K8sEnvVar *v = &(*ret)[i];
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "name", JSON_REQUIRED, &v->name));
                TRY(k8s_json_get_string(p, e, "value", JSON_OPTIONAL, &v->value));
                TRY(k8s_json_get_object(p, e, "valueFrom", JSON_OPTIONAL, &vf));
                if (vf) {
                        size_t s3 = k8s_json_path_push(p, "valueFrom");
                        DECODE_OPTIONAL_OBJECT(p, vf, "fieldRef", o, k8s_field_ref_decode(p, o, &v->field_ref));
                        DECODE_OPTIONAL_OBJECT(p, vf, "resourceFieldRef", o,
                                               k8s_resource_field_ref_decode(p, o, &v->resource_field_ref));
                        TRY(key_selector_decode(p, vf, "configMapKeyRef", &v->config_map_key_ref));
                        TRY(key_selector_decode(p, vf, "secretKeyRef", &v->secret_key_ref));
                        k8s_json_path_pop(p, s3);
                } else if (!v->value && !(v->value = strdup("")))
                        return -ENOMEM;
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

void k8s_env_from_free(K8sEnvFromSource *e, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(e[i].prefix);
                free(e[i].config_map_name);
                free(e[i].secret_name);
        }
        free(e);
}

static int env_from_ref(JsonPath *p, const cJSON *e, const char *key, char **ret_name, bool *ret_optional) {
        const cJSON *o;

        TRY(k8s_json_get_object(p, e, key, JSON_OPTIONAL, &o));
        if (!o)
                return 0;
        size_t saved = k8s_json_path_push(p, key);
        TRY(k8s_json_get_string(p, o, "name", JSON_OPTIONAL, ret_name));
        TRY(strdup_default(ret_name, ""));
        TRY(k8s_json_get_bool(p, o, "optional", false, ret_optional));
        k8s_json_path_pop(p, saved);
        return 0;
}

int k8s_env_from_decode(JsonPath *p, const cJSON *container, K8sEnvFromSource **ret, size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, container, "envFrom", &a, &n, *ret));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, "envFrom"), i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                K8sEnvFromSource *f = &(*ret)[i];
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "prefix", JSON_OPTIONAL, &f->prefix));
                TRY(strdup_default(&f->prefix, ""));
                TRY(env_from_ref(p, e, "configMapRef", &f->config_map_name, &f->optional));
                TRY(env_from_ref(p, e, "secretRef", &f->secret_name, &f->optional));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

/* --- sources kvolumed does not set up -------------------------------------------- */

const char *k8s_other_volume_source(const cJSON *source, bool pod_volume) {
        static const char *const in_tree[] = {
                "nfs",        "iscsi",          "fc",          "rbd",         "cephfs",
                "glusterfs",  "gitRepo",        "image",       "flexVolume",  "quobyte",
                "storageos",  "photonPersistentDisk", "scaleIO", "flocker",
        };
        /* The in-tree cloud sources (awsElasticBlockStore, ...) are
         * K8sInTreeSource (k8s_in_tree_source_decode()), not "other". */
        static const char *const handled[] = {
                "name",   "csi",         "persistentVolumeClaim", "ephemeral", "configMap",
                "secret", "downwardAPI", "projected",             "emptyDir",  "hostPath",
        };

        if (!cJSON_IsObject(source))
                return NULL;
        for (const cJSON *c = source->child; c; c = c->next) {
                bool known = false;
                if (!c->string || cJSON_IsNull(c))
                        continue;
                for (size_t i = 0; i < ELEMENTSOF(in_tree); i++)
                        if (streq(c->string, in_tree[i]))
                                return in_tree[i];
                if (!pod_volume)
                        continue;
                for (size_t i = 0; i < ELEMENTSOF(handled); i++)
                        known = known || streq(c->string, handled[i]);
                for (K8sInTreeKind k = 0; k < _K8S_IN_TREE_KIND_MAX; k++)
                        known = known || streq(c->string, k8s_in_tree_source_key(k));
                if (!known)
                        return c->string;
        }
        return NULL;
}
