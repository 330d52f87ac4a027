/* SPDX-License-Identifier: Apache-2.0 */
/* The common part of CSI migration: the table of plugins, the copy of the
 * PV a translation starts from, and in_tree_volume.go's topology helpers. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/csimigration/internal.h"
#include "systemd/errormsg.h"

static const MigrationPlugin *const plugins[] = {
        &migration_plugin_aws_ebs, &migration_plugin_gce_pd,  &migration_plugin_azure_disk,
        &migration_plugin_azure_file, &migration_plugin_cinder, &migration_plugin_vsphere,
        &migration_plugin_portworx,
};

static const MigrationPlugin *plugin_of_kind(K8sInTreeKind kind) {
        for (size_t i = 0; i < ELEMENTSOF(plugins); i++)
                if (plugins[i]->kind == kind)
                        return plugins[i];
        return NULL;
}

static const MigrationPlugin *plugin_of_source(const K8sInTreeSource *s) {
        return s ? plugin_of_kind(s->kind) : NULL;
}

/* --- small helpers --------------------------------------------------------- */

int migration_map_set(K8sStringMap *m, const char *key, const char *value) {
        char **keys, **values;

        for (size_t i = 0; i < m->n; i++)
                if (streq(m->keys[i], key))
                        return free_and_strdup(&m->values[i], value);
        keys = realloc(m->keys, (m->n + 1) * sizeof(char *));
        if (!keys)
                return -ENOMEM;
        m->keys = keys;
        values = realloc(m->values, (m->n + 1) * sizeof(char *));
        if (!values)
                return -ENOMEM;
        m->values = values;
        m->keys[m->n] = strdup(key);
        m->values[m->n] = strdup(value);
        if (!m->keys[m->n] || !m->values[m->n]) {
                free(m->keys[m->n]);
                free(m->values[m->n]);
                return -ENOMEM;
        }
        m->n++;
        return 0;
}

static int map_copy(const K8sStringMap *from, K8sStringMap *to) {
        for (size_t i = 0; i < from->n; i++) {
                int r = migration_map_set(to, from->keys[i], from->values[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int strv_copy(char *const *v, char ***ret) {
        size_t n = k8s_strv_length(v);
        char **c;

        *ret = NULL;
        if (!v)
                return 0;
        c = calloc(n + 1, sizeof(char *));
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (!(c[i] = strdup(v[i]))) {
                        k8s_strv_free(c);
                        return -ENOMEM;
                }
        *ret = c;
        return 0;
}

/* Appends s (copied) to a NULL-terminated vector. */
static int strv_push(char ***v, const char *s) {
        size_t n = k8s_strv_length(*v);
        char **c, *d;

        d = strdup(s);
        if (!d)
                return -ENOMEM;
        c = realloc(*v, (n + 2) * sizeof(char *));
        if (!c) {
                free(d);
                return -ENOMEM;
        }
        c[n] = d;
        c[n + 1] = NULL;
        *v = c;
        return 0;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Sorts and drops duplicates (sets.String's List()). */
static void strv_sort_uniq(char **v) {
        size_t n = k8s_strv_length(v), k = 0;

        if (n == 0)
                return;
        qsort(v, n, sizeof(char *), cmp_str);
        for (size_t i = 1; i < n; i++) {
                if (streq(v[i], v[k])) {
                        free(v[i]);
                        continue;
                }
                v[++k] = v[i];
        }
        v[k + 1] = NULL;
}

int migration_split(const char *s, const char *sep, char ***ret) {
        _cleanup_(k8s_strv_freep) char **v = NULL;
        size_t l = strlen(sep);
        const char *p = s;
        int r;

        for (;;) {
                const char *e = strstr(p, sep);
                _cleanup_free_ char *part = e ? strndup(p, e - p) : strdup(p);
                if (!part)
                        return -ENOMEM;
                r = strv_push(&v, part);
                if (r < 0)
                        return r;
                if (!e)
                        break;
                p = e + l;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

int migration_csi_new(K8sPersistentVolume *pv, const char *driver, const char *handle, bool read_only,
                      const char *fs_type) {
        K8sPvCsiSource *c = calloc(1, sizeof *c);

        if (!c)
                return -ENOMEM;
        pv->csi = c;
        c->read_only = read_only;
        if (strdup_or_null(driver, &c->driver) < 0 || strdup_or_null(strempty(handle), &c->volume_handle) < 0 ||
            strdup_or_null(isempty(fs_type) ? NULL : fs_type, &c->fs_type) < 0)
                return -ENOMEM;
        return 0;
}

int migration_access_modes_set(K8sPersistentVolume *pv, const char *mode) {
        k8s_strv_free(pv->access_modes);
        pv->access_modes = NULL;
        return strv_push(&pv->access_modes, mode);
}

int migration_name_set(K8sPersistentVolume *pv, const char *fmt, ...) {
        va_list ap;
        char *s;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        free(pv->meta.name);
        pv->meta.name = s;
        return 0;
}

/* --- the copy a PV translation starts from ------------------------------------- */

static int requirements_copy(const K8sNodeSelectorRequirement *from, size_t n, K8sNodeSelectorRequirement **ret,
                             size_t *ret_n) {
        if (n == 0)
                return 0;
        *ret = calloc(n, sizeof **ret);
        if (!*ret)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                K8sNodeSelectorRequirement *r = &(*ret)[i];
                (*ret_n)++;
                if (strdup_or_null(from[i].key, &r->key) < 0 || strdup_or_null(from[i].operator, &r->operator) < 0 ||
                    strv_copy(from[i].values, &r->values) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int pv_copy(const K8sPersistentVolume *pv, K8sPersistentVolume **ret) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = calloc(1, sizeof *c);
        const K8sMeta *m = &pv->meta;

        if (!c)
                return -ENOMEM;
        if (strdup_or_null(m->uid, &c->meta.uid) < 0 || strdup_or_null(m->namespace, &c->meta.namespace) < 0 ||
            strdup_or_null(m->name, &c->meta.name) < 0 ||
            strdup_or_null(m->resource_version, &c->meta.resource_version) < 0 ||
            strdup_or_null(m->deletion_timestamp, &c->meta.deletion_timestamp) < 0 ||
            strdup_or_null(m->controller_kind, &c->meta.controller_kind) < 0 ||
            strdup_or_null(m->controller_uid, &c->meta.controller_uid) < 0 ||
            strdup_or_null(pv->volume_mode, &c->volume_mode) < 0 || strv_copy(pv->mount_options, &c->mount_options) < 0 ||
            strv_copy(pv->access_modes, &c->access_modes) < 0 ||
            strdup_or_null(pv->claim_namespace, &c->claim_namespace) < 0 ||
            strdup_or_null(pv->claim_name, &c->claim_name) < 0 || strdup_or_null(pv->claim_uid, &c->claim_uid) < 0 ||
            strdup_or_null(pv->phase, &c->phase) < 0 || strdup_or_null(pv->capacity, &c->capacity) < 0 ||
            map_copy(&pv->labels, &c->labels) < 0 || strdup_or_null(pv->gid_annotation, &c->gid_annotation) < 0 ||
            strdup_or_null(pv->azure_file_resource_group, &c->azure_file_resource_group) < 0)
                return -ENOMEM;
        c->has_claim_ref = pv->has_claim_ref;
        if (pv->n_node_affinity > 0) {
                c->node_affinity = calloc(pv->n_node_affinity, sizeof *c->node_affinity);
                if (!c->node_affinity)
                        return -ENOMEM;
                for (size_t i = 0; i < pv->n_node_affinity; i++) {
                        const K8sNodeSelectorTerm *t = &pv->node_affinity[i];
                        K8sNodeSelectorTerm *d = &c->node_affinity[i];
                        c->n_node_affinity++;
                        if (requirements_copy(t->match_expressions, t->n_match_expressions, &d->match_expressions,
                                              &d->n_match_expressions) < 0 ||
                            requirements_copy(t->match_fields, t->n_match_fields, &d->match_fields,
                                              &d->n_match_fields) < 0)
                                return -ENOMEM;
                }
        }
        *ret = TAKE_PTR(c);
        return 0;
}

/* --- topology (in_tree_volume.go) ---------------------------------------------- */

static bool topology_key_exists(const K8sPersistentVolume *pv, const char *key) {
        for (size_t i = 0; i < pv->n_node_affinity; i++)
                for (size_t j = 0; j < pv->node_affinity[i].n_match_expressions; j++)
                        if (streq_ptr(pv->node_affinity[i].match_expressions[j].key, key))
                                return true;
        return false;
}

/* getTopologyLabel: GA unless the affinity, then the labels, say beta. */
void migration_topology_label(const K8sPersistentVolume *pv, const char **ret_zone, const char **ret_region) {
        bool beta;

        if (topology_key_exists(pv, LABEL_ZONE_GA))
                beta = false;
        else if (topology_key_exists(pv, LABEL_ZONE_BETA))
                beta = true;
        else if (k8s_string_map_get(&pv->labels, LABEL_ZONE_GA))
                beta = false;
        else
                beta = k8s_string_map_get(&pv->labels, LABEL_ZONE_BETA) != NULL;
        *ret_zone = beta ? LABEL_ZONE_BETA : LABEL_ZONE_GA;
        *ret_region = beta ? LABEL_REGION_BETA : LABEL_REGION_GA;
}

/* getTopologyValues: every value of key in any term, sorted, once. */
int migration_topology_values(const K8sPersistentVolume *pv, const char *key, char ***ret) {
        _cleanup_(k8s_strv_freep) char **v = NULL;
        int r;

        for (size_t i = 0; i < pv->n_node_affinity; i++)
                for (size_t j = 0; j < pv->node_affinity[i].n_match_expressions; j++) {
                        const K8sNodeSelectorRequirement *e = &pv->node_affinity[i].match_expressions[j];
                        if (!streq_ptr(e->key, key))
                                continue;
                        for (char *const *s = e->values; s && *s; s++)
                                if ((r = strv_push(&v, *s)) < 0)
                                        return r;
                }
        strv_sort_uniq(v);
        *ret = TAKE_PTR(v);
        return 0;
}

/* replaceTopology */
int migration_topology_replace(K8sPersistentVolume *pv, const char *old_key, const char *new_key) {
        for (size_t i = 0; i < pv->n_node_affinity; i++)
                for (size_t j = 0; j < pv->node_affinity[i].n_match_expressions; j++) {
                        K8sNodeSelectorRequirement *e = &pv->node_affinity[i].match_expressions[j];
                        if (streq_ptr(e->key, old_key) && free_and_strdup(&e->key, new_key) < 0)
                                return -ENOMEM;
                }
        return 0;
}

static char *strip_dup(const char *s) {
        size_t n;

        while (isspace((unsigned char) *s))
                s++;
        n = strlen(s);
        while (n > 0 && isspace((unsigned char) s[n - 1]))
                n--;
        return strndup(s, n);
}

/* addTopology: {key In zones} (trimmed, without empty ones, sorted, once)
 * appended to every term, one empty term made when there is none. */
int migration_topology_add(K8sPersistentVolume *pv, const char *key, char *const *zones) {
        _cleanup_(k8s_strv_freep) char **filtered = NULL;
        int r;

        for (char *const *z = zones; z && *z; z++) {
                _cleanup_free_ char *t = strip_dup(*z);
                if (!t)
                        return -ENOMEM;
                if (*t && (r = strv_push(&filtered, t)) < 0)
                        return r;
        }
        if (!filtered)
                return -EINVAL; /* "there are no valid zones to add to pv" */
        strv_sort_uniq(filtered);
        if (pv->n_node_affinity == 0) {
                pv->node_affinity = calloc(1, sizeof *pv->node_affinity);
                if (!pv->node_affinity)
                        return -ENOMEM;
                pv->n_node_affinity = 1;
        }
        for (size_t i = 0; i < pv->n_node_affinity; i++) {
                K8sNodeSelectorTerm *t = &pv->node_affinity[i];
                K8sNodeSelectorRequirement *e = realloc(t->match_expressions,
                                                        (t->n_match_expressions + 1) * sizeof *e);
                if (!e)
                        return -ENOMEM;
                t->match_expressions = e;
                e = &e[t->n_match_expressions];
                *e = (K8sNodeSelectorRequirement) {};
                t->n_match_expressions++;
                if (!(e->key = strdup(key)) || !(e->operator = strdup("In")) || strv_copy(filtered, &e->values) < 0)
                        return -ENOMEM;
        }
        return 0;
}

int migration_topology_from_in_tree(K8sPersistentVolume *pv, const char *csi_key) {
        _cleanup_(k8s_strv_freep) char **zones = NULL, **regions = NULL;
        const char *zone_label, *region_label, *label;
        int r;

        migration_topology_label(pv, &zone_label, &region_label);
        r = migration_topology_values(pv, zone_label, &zones);
        if (r < 0)
                return r;
        if (zones)
                r = migration_topology_replace(pv, zone_label, csi_key);
        else if ((label = k8s_string_map_get(&pv->labels, zone_label))) {
                r = migration_split(label, LABEL_MULTI_ZONE_DELIMITER, &zones);
                if (r < 0)
                        return r;
                r = migration_topology_add(pv, csi_key, zones);
                if (r == -EINVAL)
                        r = 0; /* the lib ignores it: no zone to add */
        }
        if (r < 0)
                return r;
        /* A beta region becomes the GA one, for nodes with only GA labels. */
        if (streq(region_label, LABEL_REGION_BETA)) {
                r = migration_topology_values(pv, region_label, &regions);
                if (r < 0)
                        return r;
                if (regions)
                        return migration_topology_replace(pv, region_label, LABEL_REGION_GA);
        }
        return 0;
}

/* --- the API ---------------------------------------------------------------------- */

int k8s_csi_translate_pv(const K8sPersistentVolume *pv, K8sPersistentVolume **ret, char **ret_error) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = NULL;
        const MigrationPlugin *plugin = plugin_of_source(pv->in_tree);
        int r;

        *ret_error = NULL;
        if (!plugin || !plugin->on)
                return -EOPNOTSUPP;
        r = pv_copy(pv, &c);
        if (r < 0)
                return r;
        r = plugin->translate_pv(pv->in_tree, c, ret_error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

int k8s_csi_translate_inline(const K8sPodVolume *v, const char *pod_namespace, K8sPersistentVolume **ret,
                             char **ret_error) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *c = NULL;
        const MigrationPlugin *plugin = plugin_of_source(v->in_tree);
        int r;

        *ret_error = NULL;
        if (!plugin || !plugin->on)
                return -EOPNOTSUPP;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        r = plugin->translate_inline(v->in_tree, v->name, pod_namespace, c, ret_error);
        if (r < 0)
                return r;
        /* translate.go: inline volumes are Filesystem unless the plugin said. */
        if (!c->volume_mode && !(c->volume_mode = strdup("Filesystem")))
                return -ENOMEM;
        *ret = TAKE_PTR(c);
        return 0;
}

const char *k8s_csi_migration_plugin_of_driver(const char *driver) {
        for (size_t i = 0; i < ELEMENTSOF(plugins); i++)
                if (plugins[i]->on && streq_ptr(plugins[i]->driver, driver))
                        return plugins[i]->plugin;
        return NULL;
}

bool k8s_csi_migration_plugin_on(const char *plugin) {
        for (size_t i = 0; i < ELEMENTSOF(plugins); i++)
                if (streq_ptr(plugins[i]->plugin, plugin))
                        return plugins[i]->on;
        return false;
}

static const char *driver_of_source(const K8sInTreeSource *s) {
        const MigrationPlugin *plugin = plugin_of_source(s);
        return plugin && plugin->on ? plugin->driver : NULL;
}

const char *k8s_csi_migration_driver_of_pv(const K8sPersistentVolume *pv) {
        return driver_of_source(pv->in_tree);
}

const char *k8s_csi_migration_driver_of_pod_volume(const K8sPodVolume *v) {
        return driver_of_source(v->in_tree);
}

const char *k8s_csi_migration_plugin_of_pv(const K8sPersistentVolume *pv) {
        const MigrationPlugin *plugin = plugin_of_source(pv->in_tree);
        return plugin ? plugin->plugin : NULL;
}

const char *k8s_csi_migration_plugin_of_pod_volume(const K8sPodVolume *v) {
        const MigrationPlugin *plugin = plugin_of_source(v->in_tree);
        return plugin ? plugin->plugin : NULL;
}

int k8s_csi_migrated_plugins_annotation(char *const *registered_drivers, char **ret) {
        _cleanup_(k8s_strv_freep) char **names = NULL;
        size_t size = 0;
        char *s, *p;
        int r;

        for (char *const *d = registered_drivers; d && *d; d++) {
                const char *plugin = k8s_csi_migration_plugin_of_driver(*d);
                if (plugin && (r = strv_push(&names, plugin)) < 0)
                        return r;
        }
        *ret = NULL;
        if (!names)
                return 0;
        strv_sort_uniq(names);
        for (char **n = names; *n; n++)
                size += strlen(*n) + 1;
        s = p = malloc(size);
        if (!s)
                return -ENOMEM;
        for (char **n = names; *n; n++)
                p = stpcpy(stpcpy(p, n == names ? "" : ","), *n);
        *ret = s;
        return 0;
}
