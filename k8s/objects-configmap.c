/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/objects-internal.h"

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
        return k8s_bytes_map_get(c->binary_data, c->n_binary_data, key);
}

int k8s_configmap_from_json(const cJSON *j, K8sConfigMap **ret, K8sDecodeError *error) {
        _cleanup_(k8s_configmap_freep) K8sConfigMap *c = NULL;
        JsonPath p;

        TRY(OBJECT_DECODE_START(&p, j, error, c));
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
