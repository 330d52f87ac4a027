/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "k8s/store.h"

/* Open addressing with linear probing and backward-shift deletion: no
 * tombstones, and an entry is two pointers and a hash. */
typedef struct Entry {
        char *key; /* NULL: empty slot */
        void *obj;
        uint64_t hash;
} Entry;

struct K8sStore {
        const K8sKind *kind;
        Entry *slots;
        size_t n_slots; /* a power of two */
        size_t n;
};

static uint64_t hash_key(const char *s) {
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (; *s; s++) {
                h ^= (unsigned char) *s;
                h *= 1099511628211ULL;
        }
        return h;
}

static char *make_key(const K8sKind *kind, const char *namespace, const char *name) {
        char *k;
        if (kind->namespaced) {
                if (asprintf(&k, "%s/%s", strempty(namespace), strempty(name)) < 0)
                        return NULL;
                return k;
        }
        return strdup(strempty(name));
}

int k8s_store_new(const K8sKind *kind, K8sStore **ret) {
        K8sStore *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = kind;
        s->n_slots = 64;
        s->slots = calloc(s->n_slots, sizeof *s->slots);
        if (!s->slots) {
                free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

static void slots_free(const K8sKind *kind, Entry *slots, size_t n_slots) {
        for (size_t i = 0; i < n_slots; i++)
                if (slots[i].key) {
                        free(slots[i].key);
                        kind->free(slots[i].obj);
                }
        free(slots);
}

K8sStore *k8s_store_free(K8sStore *s) {
        if (!s)
                return NULL;
        slots_free(s->kind, s->slots, s->n_slots);
        free(s);
        return NULL;
}

size_t k8s_store_size(const K8sStore *s) {
        return s->n;
}

static Entry *find(const K8sStore *s, const char *key, uint64_t h) {
        for (size_t i = h & (s->n_slots - 1);; i = (i + 1) & (s->n_slots - 1)) {
                Entry *e = &s->slots[i];
                if (!e->key)
                        return e;
                if (e->hash == h && streq(e->key, key))
                        return e;
        }
}

static int grow(K8sStore *s) {
        size_t n_slots = s->n_slots * 2;
        Entry *old = s->slots, *slots = calloc(n_slots, sizeof *slots);

        if (!slots)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_slots; i++)
                if (old[i].key) {
                        size_t j = old[i].hash & (n_slots - 1);
                        while (slots[j].key)
                                j = (j + 1) & (n_slots - 1);
                        slots[j] = old[i];
                }
        free(old);
        s->slots = slots;
        s->n_slots = n_slots;
        return 0;
}

void *k8s_store_get(const K8sStore *s, const char *namespace, const char *name) {
        _cleanup_free_ char *key = make_key(s->kind, namespace, name);
        Entry *e;

        if (!key)
                return NULL;
        e = find(s, key, hash_key(key));
        return e->key ? e->obj : NULL;
}

static int put_key(K8sStore *s, char *key, void *obj, void **ret_old) {
        uint64_t h = hash_key(key);
        Entry *e;

        *ret_old = NULL;
        if ((s->n + 1) * 4 > s->n_slots * 3 && grow(s) < 0) {
                free(key);
                return -ENOMEM;
        }
        e = find(s, key, h);
        if (e->key) {
                free(key);
                *ret_old = e->obj;
                e->obj = obj;
                return 0;
        }
        *e = (Entry) { .key = key, .obj = obj, .hash = h };
        s->n++;
        return 0;
}

int k8s_store_put(K8sStore *s, void *obj, void **ret_old) {
        const K8sMeta *m = obj;
        char *key = make_key(s->kind, m->namespace, m->name);

        if (!key)
                return -ENOMEM;
        return put_key(s, key, obj, ret_old);
}

static void remove_entry(K8sStore *s, Entry *e) {
        size_t mask = s->n_slots - 1, i = (size_t) (e - s->slots), j = i;

        free(e->key);
        e->key = NULL;
        e->obj = NULL;
        s->n--;
        /* Backward shift: move later entries of the cluster into the hole
         * when their home slot is not between the hole and them. */
        for (;;) {
                j = (j + 1) & mask;
                if (!s->slots[j].key)
                        return;
                size_t home = s->slots[j].hash & mask;
                bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
                if (movable) {
                        s->slots[i] = s->slots[j];
                        s->slots[j] = (Entry) {};
                        i = j;
                }
        }
}

void k8s_store_remove(K8sStore *s, const char *namespace, const char *name, void **ret_old) {
        _cleanup_free_ char *key = make_key(s->kind, namespace, name);
        Entry *e;

        *ret_old = NULL;
        if (!key)
                return;
        e = find(s, key, hash_key(key));
        if (!e->key)
                return;
        *ret_old = e->obj;
        remove_entry(s, e);
}

void *k8s_store_next(const K8sStore *s, size_t *cursor) {
        for (; *cursor < s->n_slots; (*cursor)++)
                if (s->slots[*cursor].key)
                        return s->slots[(*cursor)++].obj;
        return NULL;
}

static int deltas_push(K8sDelta **d, size_t *n, size_t *alloc, K8sDeltaType type, void *old, void *new) {
        if (*n == *alloc) {
                size_t a = MAX(*alloc * 2, (size_t) 16);
                K8sDelta *p = realloc(*d, a * sizeof *p);
                if (!p)
                        return -ENOMEM;
                *d = p;
                *alloc = a;
        }
        (*d)[(*n)++] = (K8sDelta) { .type = type, .old = old, .new = new };
        return 0;
}

char *k8s_store_key(const K8sStore *s, const char *namespace, const char *name) {
        return make_key(s->kind, namespace, name);
}

static bool key_listed(char *const *keys, const char *key) {
        for (size_t i = 0; keys && keys[i]; i++)
                if (streq(keys[i], key))
                        return true;
        return false;
}

int k8s_store_replace(K8sStore *s, void **items, size_t n_items, char *const *keep, K8sDelta **ret_deltas,
                      size_t *ret_n) {
        _cleanup_(k8s_store_freep) K8sStore *fresh = NULL;
        K8sDelta *deltas = NULL;
        size_t n = 0, alloc = 0;
        int r;

        r = k8s_store_new(s->kind, &fresh);
        if (r < 0)
                goto fail_items;
        /* Build the new map first: a duplicate key keeps the last copy. */
        for (size_t i = 0; i < n_items; i++) {
                void *old;
                r = k8s_store_put(fresh, items[i], &old);
                if (r < 0)
                        goto fail_items_from;
                items[i] = NULL;
                if (old)
                        s->kind->free(old);
                continue;
        fail_items_from:
                for (size_t k = i; k < n_items; k++)
                        s->kind->free(items[k]);
                free(items);
                return r;
        }

        /* Walk the list order again for a stable delta order. */
        for (size_t c = 0; c < fresh->n_slots; c++) {
                Entry *e = &fresh->slots[c];
                Entry *o;
                if (!e->key)
                        continue;
                o = find(s, e->key, e->hash);
                if (!o->key) {
                        r = deltas_push(&deltas, &n, &alloc, K8S_DELTA_ADD, NULL, e->obj);
                } else {
                        K8sMeta *om = o->obj, *nm = e->obj;
                        void *old = o->obj;
                        remove_entry(s, o);
                        if (!streq_ptr(om->uid, nm->uid)) {
                                r = deltas_push(&deltas, &n, &alloc, K8S_DELTA_DELETE, old, NULL);
                                if (r >= 0)
                                        r = deltas_push(&deltas, &n, &alloc, K8S_DELTA_ADD, NULL, e->obj);
                                else
                                        s->kind->free(old);
                        } else if (!streq_ptr(om->resource_version, nm->resource_version)) {
                                r = deltas_push(&deltas, &n, &alloc, K8S_DELTA_UPDATE, old, e->obj);
                                if (r < 0)
                                        s->kind->free(old);
                        } else {
                                /* Unchanged: keep the object handlers already know. */
                                s->kind->free(e->obj);
                                e->obj = old;
                        }
                }
                if (r < 0)
                        goto fail;
        }
        /* What is left in the old map vanished while we were away, except
         * what was listed but could not be read: that keeps its last version. */
        for (size_t c = 0; c < s->n_slots; c++) {
                Entry *e = &s->slots[c];
                if (!e->key)
                        continue;
                if (key_listed(keep, e->key)) {
                        void *dup = NULL;
                        r = k8s_store_put(fresh, e->obj, &dup);
                        if (r < 0)
                                goto fail;
                        if (dup) /* cannot happen: the listed copy did not decode */
                                s->kind->free(dup);
                        free(e->key);
                        *e = (Entry) {};
                        continue;
                }
                r = deltas_push(&deltas, &n, &alloc, K8S_DELTA_DELETE, e->obj, NULL);
                if (r < 0)
                        goto fail;
                free(e->key);
                *e = (Entry) {};
        }
        s->n = 0;
        free(items);

        /* Swap the maps: the old one is empty now. */
        {
                Entry *slots = s->slots;
                size_t n_slots = s->n_slots;
                s->slots = fresh->slots;
                s->n_slots = fresh->n_slots;
                s->n = fresh->n;
                fresh->slots = slots;
                fresh->n_slots = n_slots;
                fresh->n = 0;
        }
        *ret_deltas = deltas;
        *ret_n = n;
        return 0;

fail:
        /* Out of memory half-way: keep what we can, report nothing. */
        k8s_deltas_free(s->kind, deltas, n);
        free(items);
        return r;
fail_items:
        for (size_t k = 0; k < n_items; k++)
                s->kind->free(items[k]);
        free(items);
        return r;
}

void k8s_deltas_free(const K8sKind *kind, K8sDelta *deltas, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (deltas[i].old)
                        kind->free(deltas[i].old);
        free(deltas);
}
