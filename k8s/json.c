/* SPDX-License-Identifier: Apache-2.0 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "k8s/json.h"

void k8s_json_path_init(JsonPath *p, K8sDecodeError *error) {
        p->buf[0] = '\0';
        p->len = 0;
        p->error = error;
}

static size_t json_path_append(JsonPath *p, const char *key, bool index, size_t i) {
        size_t saved = p->len;
        int n;

        if (p->len >= sizeof p->buf - 1)
                return saved;
        if (index)
                n = snprintf(p->buf + p->len, sizeof p->buf - p->len, "[%zu]", i);
        else
                n = snprintf(p->buf + p->len, sizeof p->buf - p->len, "%s%s", p->len == 0 ? "" : ".", key);
        if (n > 0)
                p->len = MIN(p->len + (size_t) n, sizeof p->buf - 1);
        return saved;
}

size_t k8s_json_path_push(JsonPath *p, const char *key) {
        return json_path_append(p, key, false, 0);
}

size_t k8s_json_path_push_index(JsonPath *p, size_t index) {
        return json_path_append(p, NULL, true, index);
}

void k8s_json_path_pop(JsonPath *p, size_t saved) {
        p->len = saved;
        p->buf[saved] = '\0';
}

int k8s_json_fail(JsonPath *p, const char *key, const char *problem) {
        if (p->error) {
                size_t n = strlen(p->buf);
                memcpy(p->error->field, p->buf, n + 1);
                if (key && n + 1 < sizeof p->error->field) {
                        if (n > 0)
                                p->error->field[n++] = '.';
                        size_t k = MIN(strlen(key), sizeof p->error->field - 1 - n);
                        memcpy(p->error->field + n, key, k);
                        p->error->field[n + k] = '\0';
                }
                p->error->problem = problem;
        }
        return -EBADMSG;
}

static const cJSON *json_item(const cJSON *obj, const char *key) {
        const cJSON *j;

        if (!obj)
                return NULL;
        /* Case-sensitive: the API's field names are. */
        j = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (j && cJSON_IsNull(j))
                return NULL;
        return j;
}

int k8s_json_get_object(JsonPath *p, const cJSON *obj, const char *key, JsonFlags flags, const cJSON **ret) {
        const cJSON *j = json_item(obj, key);

        *ret = NULL;
        if (!j)
                return (flags & JSON_REQUIRED) ? k8s_json_fail(p, key, "missing") : 0;
        if (!cJSON_IsObject(j))
                return k8s_json_fail(p, key, "not an object");
        *ret = j;
        return 0;
}

int k8s_json_get_array(JsonPath *p, const cJSON *obj, const char *key, JsonFlags flags, const cJSON **ret,
                   size_t *ret_n) {
        const cJSON *j = json_item(obj, key);
        int n;

        *ret = NULL;
        *ret_n = 0;
        if (!j)
                return (flags & JSON_REQUIRED) ? k8s_json_fail(p, key, "missing") : 0;
        if (!cJSON_IsArray(j))
                return k8s_json_fail(p, key, "not an array");
        n = cJSON_GetArraySize(j);
        if (n < 0 || (size_t) n > K8S_MAX_ITEMS)
                return k8s_json_fail(p, key, "too many items");
        *ret = j;
        *ret_n = (size_t) n;
        return 0;
}

static int json_copy_string(JsonPath *p, const char *key, const cJSON *j, char **ret) {
        size_t len;

        if (!cJSON_IsString(j) || !j->valuestring)
                return k8s_json_fail(p, key, "not a string");
        len = strlen(j->valuestring);
        if (len > K8S_MAX_STRING)
                return k8s_json_fail(p, key, "string too long");
        *ret = strndup(j->valuestring, len);
        return *ret ? 0 : -ENOMEM;
}

int k8s_json_get_string(JsonPath *p, const cJSON *obj, const char *key, JsonFlags flags, char **ret) {
        const cJSON *j = json_item(obj, key);
        char *s = NULL;
        int r;

        if (!j) {
                if (flags & JSON_REQUIRED)
                        return k8s_json_fail(p, key, "missing");
                *ret = mfree_str(*ret);
                return 0;
        }
        r = json_copy_string(p, key, j, &s);
        if (r < 0)
                return r;
        if ((flags & JSON_REQUIRED) && !*s) {
                free(s);
                return k8s_json_fail(p, key, "empty");
        }
        free(*ret);
        *ret = s;
        return 0;
}

int k8s_json_get_bool(JsonPath *p, const cJSON *obj, const char *key, bool def, bool *ret) {
        const cJSON *j = json_item(obj, key);

        if (!j) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsBool(j))
                return k8s_json_fail(p, key, "not a boolean");
        *ret = cJSON_IsTrue(j);
        return 0;
}

int k8s_json_get_int(JsonPath *p, const cJSON *obj, const char *key, int64_t min, int64_t max, bool *ret_present,
                 int64_t *ret) {
        const cJSON *j = json_item(obj, key);
        double d;

        if (ret_present)
                *ret_present = false;
        if (!j)
                return 0;
        if (!cJSON_IsNumber(j))
                return k8s_json_fail(p, key, "not a number");
        d = j->valuedouble;
        /* 2^63 is exactly representable; anything at or past it is out of range. */
        if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0)
                return k8s_json_fail(p, key, "not an integer in range");
        if ((int64_t) d < min || (int64_t) d > max)
                return k8s_json_fail(p, key, "out of range");
        *ret = (int64_t) d;
        if (ret_present)
                *ret_present = true;
        return 0;
}

char **k8s_strv_free(char **v) {
        if (v)
                for (char **i = v; *i; i++)
                        free(*i);
        free(v);
        return NULL;
}

size_t k8s_strv_length(char *const *v) {
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

bool k8s_strv_contains(char *const *v, const char *s) {
        for (size_t i = 0; v && v[i]; i++)
                if (streq(v[i], s))
                        return true;
        return false;
}

int k8s_json_get_strv(JsonPath *p, const cJSON *obj, const char *key, char ***ret) {
        _cleanup_(k8s_strv_freep) char **v = NULL;
        const cJSON *a, *e;
        size_t n, i = 0;
        int r;

        r = k8s_json_get_array(p, obj, key, JSON_OPTIONAL, &a, &n);
        if (r < 0)
                return r;
        if (a) {
                v = calloc(n + 1, sizeof(char *));
                if (!v)
                        return -ENOMEM;
                size_t saved = k8s_json_path_push(p, key);
                cJSON_ArrayForEach(e, a) {
                        size_t s2 = k8s_json_path_push_index(p, i);
                        r = json_copy_string(p, NULL, e, &v[i]);
                        if (r < 0)
                                return r;
                        k8s_json_path_pop(p, s2);
                        i++;
                }
                k8s_json_path_pop(p, saved);
        }
        k8s_strv_free(*ret);
        *ret = TAKE_PTR(v);
        return 0;
}

void k8s_string_map_done(K8sStringMap *m) {
        for (size_t i = 0; i < m->n; i++) {
                free(m->keys[i]);
                free(m->values[i]);
        }
        free(m->keys);
        free(m->values);
        *m = (K8sStringMap) {};
}

const char *k8s_string_map_get(const K8sStringMap *m, const char *key) {
        for (size_t i = 0; i < m->n; i++)
                if (streq(m->keys[i], key))
                        return m->values[i];
        return NULL;
}

int k8s_json_get_string_map(JsonPath *p, const cJSON *obj, const char *key, K8sStringMap *ret) {
        _cleanup_(k8s_string_map_done) K8sStringMap m = {};
        const cJSON *o, *e;
        size_t n = 0;
        int r;

        r = k8s_json_get_object(p, obj, key, JSON_OPTIONAL, &o);
        if (r < 0)
                return r;
        if (o) {
                cJSON_ArrayForEach(e, o)
                        n++;
                if (n > K8S_MAX_ITEMS)
                        return k8s_json_fail(p, key, "too many entries");
                m.keys = calloc(MAX(n, 1u), sizeof(char *));
                m.values = calloc(MAX(n, 1u), sizeof(char *));
                if (!m.keys || !m.values)
                        return -ENOMEM;
                size_t saved = k8s_json_path_push(p, key);
                cJSON_ArrayForEach(e, o) {
                        if (!e->string)
                                return k8s_json_fail(p, NULL, "entry without a key");
                        if (strlen(e->string) > K8S_MAX_STRING)
                                return k8s_json_fail(p, NULL, "key too long");
                        r = json_copy_string(p, e->string, e, &m.values[m.n]);
                        if (r < 0)
                                return r;
                        m.keys[m.n] = strdup(e->string);
                        m.n++;
                        if (!m.keys[m.n - 1])
                                return -ENOMEM;
                }
                k8s_json_path_pop(p, saved);
        }
        k8s_string_map_done(ret);
        *ret = m;
        m = (K8sStringMap) {};
        return 0;
}

static void k8s_json_wipe(cJSON *j) {
        /* Recursion depth is bounded by cJSON's nesting limit. */
        for (cJSON *e = j; e; e = e->next) {
                if (e->valuestring)
                        explicit_bzero(e->valuestring, strlen(e->valuestring));
                if (e->child)
                        k8s_json_wipe(e->child);
        }
}

void k8s_json_wipe_delete(cJSON *j) {
        if (!j)
                return;
        if (j->valuestring)
                explicit_bzero(j->valuestring, strlen(j->valuestring));
        if (j->child)
                k8s_json_wipe(j->child);
        cJSON_Delete(j);
}
