/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/objects-internal.h"

static void requirements_free(K8sNodeSelectorRequirement *r, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(r[i].key);
                free(r[i].operator);
                k8s_strv_free(r[i].values);
        }
        free(r);
}

void k8s_node_selector_terms_free(K8sNodeSelectorTerm *t, size_t n) {
        for (size_t i = 0; i < n; i++) {
                requirements_free(t[i].match_expressions, t[i].n_match_expressions);
                requirements_free(t[i].match_fields, t[i].n_match_fields);
        }
        free(t);
}

static int requirements_decode(JsonPath *p, const cJSON *term, const char *key, K8sNodeSelectorRequirement **ret,
                               size_t *ret_n) {
        const cJSON *a;
        size_t n;

        TRY(GET_ARRAY_ALLOC(p, term, key, &a, &n, *ret));
        if (n == 0)
                return 0;
        size_t saved = k8s_json_path_push(p, key), i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                K8sNodeSelectorRequirement *r = &(*ret)[i];
                size_t s2 = k8s_json_path_push_index(p, i);
                if (!cJSON_IsObject(e))
                        return k8s_json_fail(p, NULL, "not an object");
                (*ret_n)++;
                TRY(k8s_json_get_string(p, e, "key", JSON_REQUIRED, &r->key));
                TRY(k8s_json_get_string(p, e, "operator", JSON_REQUIRED, &r->operator));
                TRY(k8s_json_get_strv(p, e, "values", &r->values));
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

static int node_affinity_decode(JsonPath *p, const cJSON *spec, K8sPersistentVolume *v) {
        const cJSON *aff, *req, *a;
        size_t n;

        TRY(k8s_json_get_object(p, spec, "nodeAffinity", JSON_OPTIONAL, &aff));
        if (!aff)
                return 0;
        size_t s1 = k8s_json_path_push(p, "nodeAffinity");
        TRY(k8s_json_get_object(p, aff, "required", JSON_OPTIONAL, &req));
        if (req) {
                size_t s2 = k8s_json_path_push(p, "required");
                TRY(k8s_json_get_array(p, req, "nodeSelectorTerms", JSON_OPTIONAL, &a, &n));
                if (n > 0 && !(v->node_affinity = calloc(n, sizeof *v->node_affinity)))
                        return -ENOMEM;
                size_t s3 = k8s_json_path_push(p, "nodeSelectorTerms"), i = 0;
                for (const cJSON *e = a ? a->child : NULL; e; e = e->next, i++) {
                        K8sNodeSelectorTerm *t = &v->node_affinity[i];
                        size_t s4 = k8s_json_path_push_index(p, i);
                        if (!cJSON_IsObject(e))
                                return k8s_json_fail(p, NULL, "not an object");
                        v->n_node_affinity++;
                        TRY(requirements_decode(p, e, "matchExpressions", &t->match_expressions,
                                                &t->n_match_expressions));
                        TRY(requirements_decode(p, e, "matchFields", &t->match_fields, &t->n_match_fields));
                        k8s_json_path_pop(p, s4);
                }
                k8s_json_path_pop(p, s3);
                k8s_json_path_pop(p, s2);
        }
        k8s_json_path_pop(p, s1);
        return 0;
}

int k8s_pv_sources_decode(JsonPath *p, const cJSON *spec, K8sPersistentVolume *v) {
        const cJSON *o;

        DECODE_OPTIONAL_OBJECT(p, spec, "hostPath", o, k8s_host_path_decode(p, o, &v->host_path));
        TRY(k8s_json_get_object(p, spec, "local", JSON_OPTIONAL, &o));
        if (o) {
                size_t saved = k8s_json_path_push(p, "local");
                TRY(k8s_json_get_string(p, o, "path", JSON_REQUIRED, &v->local_path));
                TRY(k8s_json_get_string(p, o, "fsType", JSON_OPTIONAL, &v->local_fs_type));
                k8s_json_path_pop(p, saved);
        }
        TRY(node_affinity_decode(p, spec, v));
        TRY(k8s_in_tree_source_decode(p, spec, false, &v->in_tree));
        const char *other = k8s_other_volume_source(spec, false);
        if (other && !(v->other_source = strdup(other)))
                return -ENOMEM;
        return 0;
}

/* A Gt/Lt value: a decimal int64, else the requirement does not match. */
static bool parse_int(const char *s, long long *ret) {
        char *end;
        if (!s || !*s)
                return false;
        errno = 0;
        *ret = strtoll(s, &end, 10);
        return errno == 0 && *end == '\0';
}

static bool requirement_matches(const K8sNodeSelectorRequirement *r, const char *value) {
        long long a, b;

        if (streq(r->operator, "Exists"))
                return value != NULL;
        if (streq(r->operator, "DoesNotExist"))
                return value == NULL;
        if (streq(r->operator, "In"))
                return value && strv_contains(r->values, value);
        if (streq(r->operator, "NotIn"))
                return !value || !strv_contains(r->values, value);
        if (!streq(r->operator, "Gt") && !streq(r->operator, "Lt"))
                return false; /* an operator this does not know matches nothing */
        /* Gt, Lt: exactly one value, both integers. */
        if (!value || strv_length(r->values) != 1 || !parse_int(value, &a) || !parse_int(r->values[0], &b))
                return false;
        return streq(r->operator, "Gt") ? a > b : a < b;
}

static bool term_matches(const K8sNodeSelectorTerm *t, const K8sNode *node) {
        /* An empty term matches nothing (nodeaffinity.NewNodeSelector). */
        if (t->n_match_expressions == 0 && t->n_match_fields == 0)
                return false;
        for (size_t i = 0; i < t->n_match_expressions; i++)
                if (!requirement_matches(&t->match_expressions[i],
                                         k8s_string_map_get(&node->labels, t->match_expressions[i].key)))
                        return false;
        for (size_t i = 0; i < t->n_match_fields; i++) {
                const K8sNodeSelectorRequirement *r = &t->match_fields[i];
                /* metadata.name is the only field a node selector knows. */
                if (!streq(r->key, "metadata.name") || !requirement_matches(r, node->meta.name))
                        return false;
        }
        return true;
}

bool k8s_pv_node_affinity_matches(const K8sPersistentVolume *pv, const K8sNode *node) {
        if (pv->n_node_affinity == 0)
                return true;
        for (size_t i = 0; i < pv->n_node_affinity; i++)
                if (term_matches(&pv->node_affinity[i], node))
                        return true;
        return false;
}

/* metadata.labels, and of the annotations the two kvolumed reads (a PV's
 * annotations can be large: kubectl's last-applied copy). */
int k8s_pv_metadata_decode(JsonPath *p, const cJSON *j, K8sPersistentVolume *v) {
        _cleanup_(k8s_string_map_done) K8sStringMap annotations = {};
        const cJSON *md;

        TRY(k8s_json_get_object(p, j, "metadata", JSON_REQUIRED, &md));
        size_t saved = k8s_json_path_push(p, "metadata");
        TRY(k8s_json_get_string_map(p, md, "labels", &v->labels));
        TRY(k8s_json_get_string_map(p, md, "annotations", &annotations));
        k8s_json_path_pop(p, saved);
        TRY(strdup_or_null(k8s_string_map_get(&annotations, "pv.beta.kubernetes.io/gid"), &v->gid_annotation));
        TRY(strdup_or_null(k8s_string_map_get(&annotations, "kubernetes.io/azure-file-resource-group"),
                           &v->azure_file_resource_group));
        return 0;
}
