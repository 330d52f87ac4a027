/* SPDX-License-Identifier: Apache-2.0 */
/* clusterTrustBundle sources (see trustbundle.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/base64.h"
#include "k8s/json.h"
#include "systemd/macro.h"
#include "volume/kinds/projected/trustbundle.h"

#define PEM_BEGIN "-----BEGIN CERTIFICATE-----"
#define PEM_END "-----END CERTIFICATE-----"

typedef struct Der {
        uint8_t *bytes;
        size_t size;
} Der;

static int cmp_der(const void *a, const void *b) {
        const Der *x = a, *y = b;
        int c = memcmp(x->bytes, y->bytes, MIN(x->size, y->size));
        return c != 0 ? c : (x->size > y->size) - (x->size < y->size);
}

static void base64_encode_lines(FILE *f, const uint8_t *d, size_t n) {
        static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t col = 0;

        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t) d[i] << 16 | (i + 1 < n ? (uint32_t) d[i + 1] << 8 : 0) |
                             (i + 2 < n ? d[i + 2] : 0);
                char out[4] = { tbl[v >> 18 & 63], tbl[v >> 12 & 63], i + 1 < n ? tbl[v >> 6 & 63] : '=',
                                i + 2 < n ? tbl[v & 63] : '=' };
                for (int k = 0; k < 4; k++) {
                        fputc(out[k], f);
                        if (++col == 64) {
                                fputc('\n', f);
                                col = 0;
                        }
                }
        }
        if (col > 0)
                fputc('\n', f);
}

int trustbundle_merge(const char *const *bundles, size_t n, char **ret, size_t *ret_size) {
        Der *ders = NULL;
        size_t n_ders = 0;
        char *buf = NULL;
        size_t size = 0;
        FILE *f;
        int r = 0;

        for (size_t i = 0; r >= 0 && i < n; i++) {
                const char *p = bundles[i];
                while (r >= 0 && p && (p = strstr(p, PEM_BEGIN))) {
                        const char *body = p + strlen(PEM_BEGIN), *end = strstr(body, PEM_END);
                        _cleanup_free_ char *text = NULL;
                        Der d = {}, *t;
                        if (!end) {
                                r = -EINVAL;
                                break;
                        }
                        text = strndup(body, (size_t) (end - body));
                        if (!text) {
                                r = -ENOMEM;
                                break;
                        }
                        r = k8s_base64_decode(text, &d.bytes, &d.size);
                        if (r < 0)
                                break;
                        t = reallocarray(ders, n_ders + 1, sizeof *ders);
                        if (!t) {
                                free(d.bytes);
                                r = -ENOMEM;
                                break;
                        }
                        ders = t;
                        ders[n_ders++] = d;
                        p = end + strlen(PEM_END);
                }
        }
        if (r >= 0) {
                if (n_ders > 0) /* qsort of NULL is undefined, even of nothing */
                        qsort(ders, n_ders, sizeof *ders, cmp_der);
                f = open_memstream(&buf, &size);
                if (!f)
                        r = -ENOMEM;
                for (size_t i = 0; f && i < n_ders; i++) {
                        if (i > 0 && cmp_der(&ders[i - 1], &ders[i]) == 0)
                                continue;
                        fputs(PEM_BEGIN "\n", f);
                        base64_encode_lines(f, ders[i].bytes, ders[i].size);
                        fputs(PEM_END "\n", f);
                }
                if (f && fclose(f) != 0)
                        r = -ENOMEM;
        }
        for (size_t i = 0; i < n_ders; i++)
                free(ders[i].bytes);
        free(ders);
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret = buf;
        *ret_size = size;
        return 0;
}

typedef struct Fetch {
        K8sClient *c;
        char *name, *signer, *query;
        bool has_selector, optional;
        unsigned version; /* index in versions[] */
        trustbundle_done_t done;
        void *userdata;
} Fetch;

static const char *const versions[] = { "v1beta1", "v1alpha1" };

static void fetch_free(Fetch *f) {
        free(f->name);
        free(f->signer);
        free(f->query);
        free(f);
}

static void finish(Fetch *f, int error, const char *message, uint8_t *pem, size_t size) {
        trustbundle_done_t done = f->done;
        void *userdata = f->userdata;
        fetch_free(f);
        done(error, message, pem, size, userdata);
}

static int start(Fetch *f);

static const char *string_at(const cJSON *o, const char *a, const char *b) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
        return cJSON_IsString(x) ? x->valuestring : NULL;
}

static void on_list(K8sClient *c, const K8sResponse *resp, void *userdata) {
        Fetch *f = userdata;
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        _cleanup_free_ const char **texts = NULL;
        _cleanup_free_ char *message = NULL;
        const cJSON *items, *it;
        size_t n = 0;
        char *pem = NULL;
        size_t size = 0;
        int r;

        if (resp->error >= 0 && resp->status == 404) {
                /* This version is not served: the next one, or none. */
                if (++f->version < ELEMENTSOF(versions) && start(f) >= 0)
                        return;
                finish(f, -EPROTONOSUPPORT, TRUSTBUNDLE_NOT_SERVED, NULL, 0);
                return;
        }
        if (resp->error < 0 || resp->status != 200) {
                finish(f, resp->error < 0 ? resp->error : resp->status == 403 ? -EACCES : -EIO,
                       resp->message ?: "listing clusterTrustBundles failed", NULL, 0);
                return;
        }
        j = cJSON_ParseWithLength(resp->body, resp->size);
        items = cJSON_GetObjectItemCaseSensitive(j, "items");
        if (!cJSON_IsArray(items)) {
                finish(f, -EBADMSG, "the API server's list of clusterTrustBundles has no items", NULL, 0);
                return;
        }
        texts = calloc((size_t) cJSON_GetArraySize(items) + 1, sizeof *texts);
        if (!texts) {
                finish(f, -ENOMEM, "out of memory", NULL, 0);
                return;
        }
        cJSON_ArrayForEach(it, items) {
                const char *name = string_at(it, "metadata", "name"), *signer = string_at(it, "spec", "signerName");
                const char *bundle = string_at(it, "spec", "trustBundle");
                if (!bundle)
                        continue;
                if (f->name ? !streq_ptr(name, f->name) : (!f->has_selector || !streq_ptr(signer, f->signer)))
                        continue;
                texts[n++] = bundle;
        }
        if (n == 0 && !f->optional) {
                if (f->name)
                        r = asprintf(&message, "clustertrustbundles.certificates.k8s.io \"%s\" not found", f->name);
                else
                        r = asprintf(&message, "combination of signerName=%s and labelSelector matched zero "
                                     "ClusterTrustBundles", strempty(f->signer));
                finish(f, -ENOENT, r < 0 ? "no clusterTrustBundle matched" : message, NULL, 0);
                return;
        }
        r = trustbundle_merge(texts, n, &pem, &size);
        if (r < 0) {
                finish(f, r, "a clusterTrustBundle holds a PEM block that does not decode", NULL, 0);
                return;
        }
        finish(f, 0, NULL, (uint8_t *) pem, size);
}

static int start(Fetch *f) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/apis/certificates.k8s.io/%s/clustertrustbundles%s", versions[f->version],
                     strempty(f->query)) < 0)
                return -ENOMEM;
        return k8s_client_request(f->c, "GET", path, NULL, NULL, on_list, f, NULL);
}

/* The selector in a query, percent-encoded (RFC 3986 unreserved kept). */
static int selector_query(const char *selector, char **ret) {
        size_t n = strlen(selector);
        char *q = malloc(strlen("?labelSelector=") + 3 * n + 1), *p;

        if (!q)
                return -ENOMEM;
        p = stpcpy(q, "?labelSelector=");
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char) selector[i];
                if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    strchr("-._~", ch))
                        *p++ = (char) ch;
                else
                        p += sprintf(p, "%%%02X", ch);
        }
        *p = '\0';
        *ret = q;
        return 0;
}

int trustbundle_fetch(K8sClient *c, const char *name, const char *signer, bool has_selector, const char *selector,
                      bool optional, trustbundle_done_t done, void *userdata) {
        Fetch *f = calloc(1, sizeof *f);
        int r;

        if (!f)
                return -ENOMEM;
        *f = (Fetch){ .c = c, .has_selector = has_selector, .optional = optional, .done = done, .userdata = userdata };
        if (strdup_or_null(name, &f->name) < 0 || strdup_or_null(signer, &f->signer) < 0 ||
            (!name && has_selector && !isempty(selector) && selector_query(selector, &f->query) < 0)) {
                fetch_free(f);
                return -ENOMEM;
        }
        r = start(f);
        if (r < 0)
                fetch_free(f);
        return r;
}
