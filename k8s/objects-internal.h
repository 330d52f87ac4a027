/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Shared by the decoders of k8s/objects*.c; not for other modules. */

#include "k8s/objects.h"

/* Returns a negative result of "expr" at once: every decoder step either
 * succeeds or ends the decode with its -errno. */
#define TRY(expr)                                                                                          \
        do {                                                                                               \
                int _r = (expr);                                                                           \
                if (_r < 0)                                                                                \
                        return _r;                                                                         \
        } while (0)

/* obj[key], an optional array, and a zeroed array of as many elements of
 * elem_size bytes for its decode in *ret; none (absent or empty): *ret_n is
 * 0 and *ret left as it was.  GET_ARRAY_ALLOC() takes the size from ptr. */
/* obj[key], an optional object: when it is there, "call" decodes it (as
 * "o", which the caller declares) with key on the path. */
#define DECODE_OPTIONAL_OBJECT(p, obj, key, o, call)                                                       \
        do {                                                                                               \
                TRY(k8s_json_get_object(p, obj, key, JSON_OPTIONAL, &(o)));                                \
                if (o) {                                                                                   \
                        size_t _saved = k8s_json_path_push(p, key);                                        \
                        TRY(call);                                                                         \
                        k8s_json_path_pop(p, _saved);                                                      \
                }                                                                                          \
        } while (0)

int k8s_json_get_array_alloc(JsonPath *p, const cJSON *obj, const char *key, size_t elem_size, const cJSON **ret_a,
                             size_t *ret_n, void **ret);
#define GET_ARRAY_ALLOC(p, obj, key, a, n, ptr)                                                            \
        k8s_json_get_array_alloc(p, obj, key, sizeof *(ptr), a, n, (void **) &(ptr))

/* The start of every object's decode: its path (reporting to error), the
 * check that it is an object, and its zeroed struct of size bytes in *ret.
 * OBJECT_DECODE_START() takes the size from ptr. */
int k8s_object_decode_start(JsonPath *p, const cJSON *j, K8sDecodeError *error, size_t size, void **ret);
#define OBJECT_DECODE_START(p, j, error, ptr) k8s_object_decode_start(p, j, error, sizeof *(ptr), (void **) &(ptr))

int k8s_meta_decode(JsonPath *p, const cJSON *j, bool need_uid, K8sMeta *m);
void k8s_meta_done(K8sMeta *m);

/* spec.hostPath, spec.local, spec.nodeAffinity and the in-tree source name
 * of a PV ("spec" is on the path). */
int k8s_pv_sources_decode(JsonPath *p, const cJSON *spec, K8sPersistentVolume *v);
void k8s_node_selector_terms_free(K8sNodeSelectorTerm *t, size_t n);
/* metadata.labels and the annotations a PV keeps. */
int k8s_pv_metadata_decode(JsonPath *p, const cJSON *j, K8sPersistentVolume *v);

/* An object of base64 values (Secret data, ConfigMap binaryData), decoded;
 * a message names the key, never the value. */
int k8s_bytes_map_decode(JsonPath *p, const cJSON *obj, const char *key, K8sSecretEntry **ret, size_t *ret_n);
/* Wipes keys and values before freeing them. */
void k8s_bytes_map_free(K8sSecretEntry *e, size_t n);
const K8sSecretEntry *k8s_bytes_map_get(const K8sSecretEntry *e, size_t n, const char *key);
