/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/base64.h"
#include "k8s/objects-internal.h"

#define TRY(expr)                                                                                          \
        do {                                                                                               \
                int _r = (expr);                                                                           \
                if (_r < 0)                                                                                \
                        return _r;                                                                         \
        } while (0)

void k8s_bytes_map_free(K8sSecretEntry *e, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (e[i].key) {
                        explicit_bzero(e[i].key, strlen(e[i].key));
                        free(e[i].key);
                }
                if (e[i].value) {
                        explicit_bzero(e[i].value, e[i].size);
                        free(e[i].value);
                }
        }
        free(e);
}

int k8s_bytes_map_decode(JsonPath *p, const cJSON *obj, const char *key, K8sSecretEntry **ret, size_t *ret_n) {
        const cJSON *map, *e;
        size_t n = 0;

        TRY(k8s_json_get_object(p, obj, key, JSON_OPTIONAL, &map));
        if (!map)
                return 0;
        cJSON_ArrayForEach(e, map)
                n++;
        if (n > K8S_MAX_ITEMS)
                return k8s_json_fail(p, key, "too many entries");
        *ret = calloc(MAX(n, 1u), sizeof **ret);
        if (!*ret)
                return -ENOMEM;
        size_t saved = k8s_json_path_push(p, key);
        cJSON_ArrayForEach(e, map) {
                K8sSecretEntry *d = &(*ret)[*ret_n];
                if (!e->string)
                        return k8s_json_fail(p, NULL, "entry without a key");
                if (!cJSON_IsString(e) || !e->valuestring)
                        return k8s_json_fail(p, e->string, "not a string");
                (*ret_n)++;
                if (!(d->key = strdup(e->string)))
                        return -ENOMEM;
                if (k8s_base64_decode(e->valuestring, &d->value, &d->size) < 0)
                        return k8s_json_fail(p, e->string, "not base64");
        }
        k8s_json_path_pop(p, saved);
        return 0;
}

K8sConfigMap *k8s_configmap_free(K8sConfigMap *c) {
        if (!c)
                return NULL;
        k8s_meta_done(&c->meta);
        k8s_string_map_done(&c->data);
        k8s_bytes_map_free(c->binary_data, c->n_binary_data);
        free(c);
        return NULL;
}

const K8sSecretEntry *k8s_configmap_get_binary(const K8sConfigMap *c, const char *key) {
        for (size_t i = 0; i < c->n_binary_data; i++)
                if (streq(c->binary_data[i].key, key))
                        return &c->binary_data[i];
        return NULL;
}

int k8s_configmap_from_json(const cJSON *j, K8sConfigMap **ret, K8sDecodeError *error) {
        _cleanup_(k8s_configmap_freep) K8sConfigMap *c = NULL;
        JsonPath p;

        k8s_json_path_init(&p, error);
        if (!cJSON_IsObject(j))
                return k8s_json_fail(&p, NULL, "not an object");
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        TRY(k8s_meta_decode(&p, j, false, &c->meta));
        TRY(k8s_json_get_string_map(&p, j, "data", &c->data));
        TRY(k8s_bytes_map_decode(&p, j, "binaryData", &c->binary_data, &c->n_binary_data));
        TRY(k8s_json_get_bool(&p, j, "immutable", false, &c->immutable));
        /* API validation: a key is in data or binaryData, not both. */
        for (size_t i = 0; i < c->n_binary_data; i++)
                if (k8s_string_map_get(&c->data, c->binary_data[i].key))
                        return k8s_json_fail(&p, "binaryData", "a key of data repeated in binaryData");
        *ret = TAKE_PTR(c);
        return 0;
}
