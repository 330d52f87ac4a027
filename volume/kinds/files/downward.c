/* SPDX-License-Identifier: Apache-2.0 */
/* The downward API's values, as kubelet renders them (see downward.h).
 * Messages are kubelet's, so that an operator searching for them finds
 * kubelet's documentation and issues. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "systemd/errormsg.h"
#include "systemd/macro.h"
#include "volume/kinds/files/downward.h"

static bool startswith(const char *s, const char *prefix) {
        return strncmp(s, prefix, strlen(prefix)) == 0;
}

typedef struct Buf {
        char *s;
        size_t n, cap;
} Buf;

static int buf_add(Buf *b, const char *s, size_t n) {
        if (b->n + n + 1 > b->cap) {
                size_t cap = MAX(b->cap * 2, b->n + n + 64);
                char *t = realloc(b->s, cap);
                if (!t)
                        return -ENOMEM;
                b->s = t;
                b->cap = cap;
        }
        memcpy(b->s + b->n, s, n);
        b->n += n;
        b->s[b->n] = '\0';
        return 0;
}

static int buf_str(Buf *b, const char *s) {
        return buf_add(b, s, strlen(s));
}

static int buf_take(Buf *b, char **ret) {
        if (!b->s) {
                b->s = strdup("");
                if (!b->s)
                        return -ENOMEM;
        }
        *ret = b->s;
        *b = (Buf){};
        return 0;
}

/* One UTF-8 sequence at s (n bytes left): its rune and length, or -1 for a
 * byte that starts none (Go then sees utf8.RuneError of width 1). */
static int32_t utf8_decode(const unsigned char *s, size_t n, size_t *len) {
        int32_t r, min;
        size_t k;

        *len = 1;
        if (s[0] < 0x80)
                return s[0];
        if ((s[0] & 0xe0) == 0xc0)
                k = 2, r = s[0] & 0x1f, min = 0x80;
        else if ((s[0] & 0xf0) == 0xe0)
                k = 3, r = s[0] & 0x0f, min = 0x800;
        else if ((s[0] & 0xf8) == 0xf0)
                k = 4, r = s[0] & 0x07, min = 0x10000;
        else
                return -1;
        if (k > n)
                return -1;
        for (size_t i = 1; i < k; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return -1;
                r = (r << 6) | (s[i] & 0x3f);
        }
        if (r < min || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff))
                return -1;
        *len = k;
        return r;
}

/* Go's unicode.IsPrint for the runes a label or annotation value plausibly
 * holds: the C0 and C1 controls, DEL, the soft hyphen, the separators other
 * than U+0020 (spaces, line and paragraph separators), the format
 * characters around the BOM and the noncharacters are not printable.
 * Not Go's whole table (unassigned code points count as printable here). */
static bool rune_printable(int32_t r) {
        if (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0xad)
                return false;
        if (r == 0x1680 || (r >= 0x2000 && r <= 0x200f) || (r >= 0x2028 && r <= 0x202f) ||
            (r >= 0x205f && r <= 0x206f) || r == 0x3000 || r == 0xfeff)
                return false;
        if ((r & 0xfffe) == 0xfffe || (r >= 0xfdd0 && r <= 0xfdef) || (r >= 0xe000 && r <= 0xf8ff) ||
            r >= 0xf0000)
                return false;
        return true;
}

static int quote_into(Buf *b, const char *s) {
        const unsigned char *p = (const unsigned char *) s;
        size_t n = strlen(s);
        char tmp[16];
        int r;

        r = buf_add(b, "\"", 1);
        while (r >= 0 && n > 0) {
                size_t len;
                int32_t c = utf8_decode(p, n, &len);

                if (c < 0) {
                        snprintf(tmp, sizeof tmp, "\\x%02x", p[0]);
                        r = buf_str(b, tmp);
                } else if (c == '"' || c == '\\') {
                        tmp[0] = '\\', tmp[1] = (char) c, tmp[2] = '\0';
                        r = buf_str(b, tmp);
                } else if (rune_printable(c))
                        r = buf_add(b, (const char *) p, len);
                else {
                        switch (c) {
                        case '\a': r = buf_str(b, "\\a"); break;
                        case '\b': r = buf_str(b, "\\b"); break;
                        case '\f': r = buf_str(b, "\\f"); break;
                        case '\n': r = buf_str(b, "\\n"); break;
                        case '\r': r = buf_str(b, "\\r"); break;
                        case '\t': r = buf_str(b, "\\t"); break;
                        case '\v': r = buf_str(b, "\\v"); break;
                        default:
                                if (c < ' ' || c == 0x7f)
                                        snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned) c);
                                else if (c < 0x10000)
                                        snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned) c);
                                else
                                        snprintf(tmp, sizeof tmp, "\\U%08x", (unsigned) c);
                                r = buf_str(b, tmp);
                        }
                }
                p += len;
                n -= len;
        }
        return r < 0 ? r : buf_add(b, "\"", 1);
}

int downward_quote(const char *s, char **ret) {
        Buf b = {};
        int r = quote_into(&b, s);
        if (r < 0) {
                free(b.s);
                return r;
        }
        return buf_take(&b, ret);
}

static int cmp_index(const void *a, const void *b, void *keys) {
        char **k = keys;
        return strcmp(k[*(const size_t *) a], k[*(const size_t *) b]);
}

int downward_format_map(const K8sStringMap *m, char **ret) {
        _cleanup_free_ size_t *order = NULL;
        Buf b = {};
        int r = 0;

        if (m->n > 0) {
                order = calloc(m->n, sizeof *order);
                if (!order)
                        return -ENOMEM;
                for (size_t i = 0; i < m->n; i++)
                        order[i] = i;
                qsort_r(order, m->n, sizeof *order, cmp_index, m->keys);
        }
        for (size_t i = 0; r >= 0 && i < m->n; i++) {
                size_t k = order[i];
                /* A key twice (the JSON had it twice): Go's map kept the last. */
                if (i + 1 < m->n && streq(m->keys[k], m->keys[order[i + 1]]))
                        continue;
                if (b.n > 0)
                        r = buf_add(&b, "\n", 1);
                if (r >= 0)
                        r = buf_str(&b, m->keys[k]);
                if (r >= 0)
                        r = buf_add(&b, "=", 1);
                if (r >= 0)
                        r = quote_into(&b, m->values[k]);
        }
        if (r < 0) {
                free(b.s);
                return r;
        }
        return buf_take(&b, ret);
}

/* validation.IsQualifiedName: [prefix/]name, prefix a DNS subdomain of at
 * most 253, name at most 63 of [A-Za-z0-9] at both ends and [-_.A-Za-z0-9]
 * inside. */
static bool qualified_name(const char *s) {
        const char *slash = strchr(s, '/'), *name = slash ? slash + 1 : s;
        size_t n = strlen(name);

        if (slash) {
                size_t pl = (size_t) (slash - s);
                if (pl == 0 || pl > 253 || strchr(name, '/'))
                        return false;
                for (size_t i = 0; i < pl; i++) {
                        char c = s[i];
                        if (!(islower((unsigned char) c) || isdigit((unsigned char) c) || c == '-' || c == '.'))
                                return false;
                }
                if (!isalnum((unsigned char) s[0]) || !isalnum((unsigned char) s[pl - 1]))
                        return false;
        }
        if (n == 0 || n > 63 || !isalnum((unsigned char) name[0]) || !isalnum((unsigned char) name[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) name[i]) && !strchr("-_.", name[i]))
                        return false;
        return true;
}

static int dup_value(const char *s, char **ret) {
        char *t = strdup(s ?: "");
        if (!t)
                return -ENOMEM;
        *ret = t;
        return 0;
}

static int join(char *const *v, char **ret) {
        Buf b = {};
        int r = 0;

        for (size_t i = 0; r >= 0 && v && v[i]; i++) {
                if (i > 0)
                        r = buf_add(&b, ",", 1);
                if (r >= 0)
                        r = buf_str(&b, v[i]);
        }
        if (r < 0) {
                free(b.s);
                return r;
        }
        return buf_take(&b, ret);
}

int downward_field_value(const K8sPod *pod, const char *field_path, bool env, char **ret, char **ret_error) {
        size_t n = strlen(field_path);
        const char *open;

        if (ret_error)
                *ret_error = NULL;

        /* SplitMaybeSubscriptedPath: "<path>['<subscript>']". */
        open = n >= 2 && streq(field_path + n - 2, "']") ? strstr(field_path, "['") : NULL;
        if (open && open > field_path) {
                _cleanup_free_ char *path = strndup(field_path, (size_t) (open - field_path));
                _cleanup_free_ char *key = strndup(open + 2, (size_t) (field_path + n - 2 - (open + 2)));
                if (!path || !key)
                        return -ENOMEM;
                if (streq(path, "metadata.annotations") || streq(path, "metadata.labels")) {
                        bool ann = streq(path, "metadata.annotations");
                        _cleanup_free_ char *check = strdup(key);
                        if (!check)
                                return -ENOMEM;
                        if (ann) /* kubelet lowercases an annotation's key to check it */
                                for (char *c = check; *c; c++)
                                        *c = (char) tolower((unsigned char) *c);
                        if (!qualified_name(check))
                                return error_message(ret_error, -EINVAL,
                                                     "invalid key subscript in %s: not a qualified name",
                                                     field_path);
                        return dup_value(k8s_string_map_get(ann ? &pod->annotations : &pod->labels, key), ret);
                }
                return error_message(ret_error, -EINVAL, "fieldPath \"%s\" does not support subscript",
                                     field_path);
        }

        if (streq(field_path, "metadata.annotations"))
                return downward_format_map(&pod->annotations, ret);
        if (streq(field_path, "metadata.labels"))
                return downward_format_map(&pod->labels, ret);
        if (streq(field_path, "metadata.name"))
                return dup_value(pod->meta.name, ret);
        if (streq(field_path, "metadata.namespace"))
                return dup_value(pod->meta.namespace, ret);
        if (streq(field_path, "metadata.uid"))
                return dup_value(pod->meta.uid, ret);
        if (env) {
                if (streq(field_path, "spec.nodeName"))
                        return dup_value(pod->node_name, ret);
                if (streq(field_path, "spec.serviceAccountName"))
                        return dup_value(pod->service_account_name, ret);
                if (streq(field_path, "status.hostIP"))
                        return dup_value(pod->host_ips && pod->host_ips[0] ? pod->host_ips[0] : pod->host_ip, ret);
                if (streq(field_path, "status.hostIPs"))
                        return pod->host_ips ? join(pod->host_ips, ret) : dup_value(pod->host_ip, ret);
                if (streq(field_path, "status.podIP"))
                        return dup_value(pod->pod_ips && pod->pod_ips[0] ? pod->pod_ips[0] : pod->pod_ip, ret);
                if (streq(field_path, "status.podIPs"))
                        return pod->pod_ips ? join(pod->pod_ips, ret) : dup_value(pod->pod_ip, ret);
        }
        return error_message(ret_error, -EINVAL, "unsupported fieldPath: %s", field_path);
}

static const K8sContainer *find_container(const K8sPod *pod, const char *name) {
        for (size_t i = 0; name && i < pod->n_containers; i++)
                if (streq_ptr(pod->containers[i].name, name))
                        return &pod->containers[i];
        for (size_t i = 0; name && i < pod->n_init_containers; i++)
                if (streq_ptr(pod->init_containers[i].name, name))
                        return &pod->init_containers[i];
        return NULL;
}

int downward_resource_value(const K8sPod *pod, const K8sResourceFieldRef *ref, const char *container,
                            const K8sStringMap *allocatable, char **ret, char **ret_error) {
        const char *res = ref->resource ?: "", *name, *q = NULL;
        const K8sContainer *c;
        bool limits, cpu;
        int64_t value = 0, divisor = 0;
        int r;

        if (ret_error)
                *ret_error = NULL;
        container = container ?: ref->container_name;
        c = find_container(pod, container);
        if (!c)
                return error_message(ret_error, -EINVAL, "container %s not found", container ?: "");

        if (startswith(res, "limits."))
                limits = true, name = res + strlen("limits.");
        else if (startswith(res, "requests."))
                limits = false, name = res + strlen("requests.");
        else
                return error_message(ret_error, -EINVAL, "unsupported container resource : %s", res);
        if (!streq(name, "cpu") && !streq(name, "memory") && !streq(name, "ephemeral-storage") &&
            !startswith(name, "hugepages-"))
                return error_message(ret_error, -EINVAL, "unsupported container resource : %s", res);
        cpu = streq(name, "cpu");

        q = k8s_string_map_get(limits ? &c->limits : &c->requests, name);
        if (q) {
                r = cpu ? k8s_quantity_parse_milli(q, &value) : k8s_quantity_parse(q, &value);
                if (r < 0)
                        return error_message(ret_error, -EINVAL,
                                             "the container's quantity of %s does not parse", res);
        }
        /* MergeContainerResourceLimits: an unset or zero limit of cpu, memory
         * or ephemeral storage is the Node's allocatable (hugepages are never
         * overcommitted: their limit is always set). */
        if (limits && value == 0 && !startswith(name, "hugepages-") && allocatable) {
                q = k8s_string_map_get(allocatable, name);
                if (q) {
                        r = cpu ? k8s_quantity_parse_milli(q, &value) : k8s_quantity_parse(q, &value);
                        if (r < 0)
                                return error_message(ret_error, -EINVAL,
                                                     "the Node's allocatable %s does not parse", name);
                }
        }

        /* A divisor that the decoder let through parses; "0" is "1". */
        r = cpu ? k8s_quantity_parse_milli(ref->divisor ?: "1", &divisor)
                : k8s_quantity_parse(ref->divisor ?: "1", &divisor);
        if (r < 0)
                return error_message(ret_error, -EINVAL, "the divisor of %s does not parse", res);
        if (divisor == 0)
                divisor = cpu ? 1000 : 1;

        /* math.Ceil(value / divisor), in integers (exact where float64 is not). */
        value = value / divisor + (value % divisor != 0);
        if (asprintf(ret, "%" PRIi64, value) < 0)
                return -ENOMEM;
        return 0;
}

bool downward_needs_node(const K8sDownwardAPIProjection *d) {
        for (size_t i = 0; d && i < d->n_items; i++)
                if (d->items[i].resource_field_ref)
                        return true;
        return false;
}

int downward_collect(const K8sPod *pod, const K8sDownwardAPIProjection *d, int64_t default_mode,
                     const K8sStringMap *allocatable, AtomicPayload *p, char **ret_error) {
        _cleanup_free_ char *errors = NULL;
        size_t n_errors = 0;
        int r;

        if (ret_error)
                *ret_error = NULL;
        for (size_t i = 0; i < d->n_items; i++) {
                const K8sDownwardAPIFile *f = &d->items[i];
                _cleanup_free_ char *value = NULL, *error = NULL;
                mode_t mode = (mode_t) (f->has_mode ? f->mode : default_mode);

                if (f->field_ref)
                        r = downward_field_value(pod, f->field_ref->field_path ?: "", false, &value, &error);
                else if (f->resource_field_ref)
                        r = downward_resource_value(pod, f->resource_field_ref, NULL, allocatable, &value, &error);
                else
                        r = 0; /* neither: API validation refuses it; kubelet writes an empty file */
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        char *t = NULL;
                        if (asprintf(&t, "%s%s%s", errors ?: "", errors ? ", " : "", error ?: "error") < 0)
                                return -ENOMEM;
                        free(errors);
                        errors = t;
                        n_errors++;
                }
                /* Kubelet keeps the file (empty) in the map even when its value failed. */
                r = atomic_payload_add(p, f->path ?: "", value ?: "", value ? strlen(value) : 0, mode,
                                       ATOMIC_UID_NONE);
                if (r < 0)
                        return r;
        }
        if (n_errors == 0)
                return 0;
        if (ret_error) {
                if (n_errors > 1) {
                        char *t = NULL;
                        if (asprintf(&t, "[%s]", errors) < 0)
                                return -ENOMEM;
                        *ret_error = t;
                } else
                        *ret_error = TAKE_PTR(errors);
        }
        return -EINVAL;
}
