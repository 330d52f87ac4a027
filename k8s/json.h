/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Typed reads of cJSON values for the object decoders.  Every reader checks
 * the type and size of what it reads, and on failure records which field was
 * wrong (as a JSON path such as "spec.volumes[2].csi.driver") so that the one
 * log line about a skipped object names it. */

#include <cjson/cJSON.h>
#include <stdint.h>

#include "systemd/macro.h"

/* Longest string accepted from the API; the API server caps annotations at
 * 256 KiB in total, and nothing kvolumed reads is legitimately longer. */
#define K8S_MAX_STRING (256u * 1024u)
/* Most entries accepted in one array or map of an object. */
#define K8S_MAX_ITEMS 65536u

typedef struct K8sDecodeError {
        char field[256];     /* JSON path of the offending field */
        const char *problem; /* "missing", "not a string", ... (static) */
} K8sDecodeError;

/* Tracks the JSON path while decoding; cheap, on the stack. */
typedef struct JsonPath {
        char buf[256];
        size_t len;
        K8sDecodeError *error;
} JsonPath;

void k8s_json_path_init(JsonPath *p, K8sDecodeError *error);
/* Appends ".key" (or "key" at the root) and returns the previous length for k8s_json_path_pop(). */
size_t k8s_json_path_push(JsonPath *p, const char *key);
size_t k8s_json_path_push_index(JsonPath *p, size_t index);
void k8s_json_path_pop(JsonPath *p, size_t saved);
/* Records "path.key: problem" and returns -EBADMSG. */
int k8s_json_fail(JsonPath *p, const char *key, const char *problem);

typedef enum JsonFlags {
        JSON_OPTIONAL = 0,
        JSON_REQUIRED = 1 << 0,
} JsonFlags;

/* Each reader treats an absent key and a JSON null alike ("absent"). */
int k8s_json_get_object(JsonPath *p, const cJSON *obj, const char *key, JsonFlags flags, const cJSON **ret);
int k8s_json_get_array(JsonPath *p, const cJSON *obj, const char *key, JsonFlags flags, const cJSON **ret,
                   size_t *ret_n);
int k8s_json_get_string(JsonPath *p, const cJSON *obj, const char *key, JsonFlags flags, char **ret);
int k8s_json_get_bool(JsonPath *p, const cJSON *obj, const char *key, bool def, bool *ret);
/* An integral number within [min, max]; *ret_present false (and *ret untouched) when absent. */
int k8s_json_get_int(JsonPath *p, const cJSON *obj, const char *key, int64_t min, int64_t max, bool *ret_present,
                 int64_t *ret);
/* An array of strings as a NULL-terminated vector (NULL when absent). */
int k8s_json_get_strv(JsonPath *p, const cJSON *obj, const char *key, char ***ret);

typedef struct K8sStringMap {
        char **keys;
        char **values;
        size_t n;
} K8sStringMap;

/* An object of string values. */
int k8s_json_get_string_map(JsonPath *p, const cJSON *obj, const char *key, K8sStringMap *ret);
void k8s_string_map_done(K8sStringMap *m);
const char *k8s_string_map_get(const K8sStringMap *m, const char *key);

char **k8s_strv_free(char **v);
size_t k8s_strv_length(char *const *v);
bool k8s_strv_contains(char *const *v, const char *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, k8s_strv_free);

/* Short names, as volume/ uses them; inline so they never clash at link time. */
static inline char **strv_free(char **v) {
        return k8s_strv_free(v);
}
static inline size_t strv_length(char *const *v) {
        return k8s_strv_length(v);
}
static inline bool strv_contains(char *const *v, const char *s) {
        return k8s_strv_contains(v, s);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, strv_free);

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON *, cJSON_Delete);

/* Overwrites every string of the tree before freeing it (Secret bodies). */
void k8s_json_wipe_delete(cJSON *j);
