/* SPDX-License-Identifier: Apache-2.0 */
/* kubelet's MakePayload for configMap and secret volumes: see keyprojection.h. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "systemd/macro.h"
#include "volume/kinds/files/keyprojection.h"

/* A key of the object: its bytes, or false when it has none. */
static bool find_key(const KeySource *src, const char *key, const uint8_t **ret, size_t *ret_size) {
        for (size_t i = 0; src->text && i < src->text->n; i++)
                if (streq(src->text->keys[i], key)) {
                        *ret = (const uint8_t *) src->text->values[i];
                        *ret_size = strlen(src->text->values[i]);
                        return true;
                }
        for (size_t i = 0; i < src->n_bytes; i++)
                if (streq(src->bytes[i].key, key)) {
                        *ret = src->bytes[i].value;
                        *ret_size = src->bytes[i].size;
                        return true;
                }
        return false;
}

static int add_checked(AtomicPayload *payload, const char *path, const uint8_t *data, size_t size, mode_t mode,
                       char **ret_error) {
        const char *reason = NULL;

        if (atomic_payload_validate_path(path, &reason) < 0) {
                if (ret_error && asprintf(ret_error, "invalid path \"%s\": %s", path, reason ? reason : "invalid") < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        return atomic_payload_add(payload, path, data, size, mode, ATOMIC_UID_NONE);
}

int key_projection_append(const K8sKeyProjection *proj, const KeySource *src, mode_t default_mode,
                          AtomicPayload *payload, char **ret_error) {
        const uint8_t *data;
        size_t size;
        int r;

        if (ret_error)
                *ret_error = NULL;
        if (proj->n_items == 0) {
                for (size_t i = 0; src->text && i < src->text->n; i++) {
                        r = add_checked(payload, src->text->keys[i], (const uint8_t *) src->text->values[i],
                                        strlen(src->text->values[i]), default_mode, ret_error);
                        if (r < 0)
                                return r;
                }
                for (size_t i = 0; i < src->n_bytes; i++) {
                        r = add_checked(payload, src->bytes[i].key, src->bytes[i].value, src->bytes[i].size,
                                        default_mode, ret_error);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        for (size_t i = 0; i < proj->n_items; i++) {
                const K8sKeyToPath *it = &proj->items[i];

                if (!it->key || !find_key(src, it->key, &data, &size)) {
                        if (proj->optional)
                                continue;
                        /* kubelet: "configmap references non-existent config key: x",
                         * "references non-existent secret key: x". */
                        if (ret_error &&
                            asprintf(ret_error, "%s references non-existent %s key: %s",
                                     streq(src->kind, "secret") ? "secret" : "configmap",
                                     streq(src->kind, "secret") ? "secret" : "config", strempty(it->key)) < 0)
                                *ret_error = NULL;
                        return -ENOENT;
                }
                r = add_checked(payload, it->path ? it->path : "", data, size,
                                it->has_mode ? (mode_t) (it->mode & 07777) : default_mode, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int file_cmp(const void *a, const void *b) {
        return strcmp(((const AtomicPayloadFile *) a)->path, ((const AtomicPayloadFile *) b)->path);
}

static void file_wipe(AtomicPayloadFile *f) {
        if (f->data)
                explicit_bzero(f->data, f->size);
        free(f->data);
        free(f->path);
        *f = (AtomicPayloadFile){};
}

int key_payload_normalize(AtomicPayload *payload) {
        size_t n = 0;

        /* The last of each path wins (kubelet's map); payloads are small. */
        for (size_t i = 0; i < payload->n; i++) {
                bool later = false;
                for (size_t j = i + 1; j < payload->n && !later; j++)
                        later = streq(payload->files[i].path, payload->files[j].path);
                if (later)
                        file_wipe(&payload->files[i]);
                else
                        payload->files[n++] = payload->files[i];
        }
        payload->n = n;
        if (n > 1)
                qsort(payload->files, n, sizeof *payload->files, file_cmp);
        return 0;
}

int key_payload_digest(const AtomicPayload *payload, uint8_t ret[static KEY_PAYLOAD_DIGEST_SIZE]) {
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        unsigned len = 0;
        int ok;

        if (!ctx)
                return -ENOMEM;
        ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
        for (size_t i = 0; ok && i < payload->n; i++) {
                const AtomicPayloadFile *f = &payload->files[i];
                uint64_t head[3] = { strlen(f->path), f->size, ((uint64_t) f->mode << 32) | (uint32_t) f->uid };

                ok = EVP_DigestUpdate(ctx, head, sizeof head) == 1 && EVP_DigestUpdate(ctx, f->path, head[0]) == 1 &&
                     (f->size == 0 || EVP_DigestUpdate(ctx, f->data, f->size) == 1);
        }
        ok = ok && EVP_DigestFinal_ex(ctx, ret, &len) == 1 && len == KEY_PAYLOAD_DIGEST_SIZE;
        EVP_MD_CTX_free(ctx);
        return ok ? 0 : -EIO;
}

void key_payload_wipe(AtomicPayload *payload) {
        for (size_t i = 0; i < payload->n; i++)
                file_wipe(&payload->files[i]);
        free(payload->files);
        *payload = (AtomicPayload){};
}
