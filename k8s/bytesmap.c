/* SPDX-License-Identifier: Apache-2.0 */
/* An object of base64 values: Secret data and ConfigMap binaryData, the same
 * map with the same care (keys and values wiped on free, a message names the
 * key and never the value). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/base64.h"
#include "k8s/objects-internal.h"

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
                /* Never the value in a message: only the key. */
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

const K8sSecretEntry *k8s_bytes_map_get(const K8sSecretEntry *e, size_t n, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (streq(e[i].key, key))
                        return &e[i];
        return NULL;
}
