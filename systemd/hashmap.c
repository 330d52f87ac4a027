/* SPDX-License-Identifier: Apache-2.0 */
#include "systemd/hashmap.h"

typedef struct Entry {
        char *key; /* NULL: empty; TOMBSTONE: removed */
        void *value;
        uint64_t hash;
} Entry;

static char tombstone_mark;
#define TOMBSTONE (&tombstone_mark)

struct Hashmap {
        Entry *entries;
        size_t capacity; /* power of two */
        size_t n_used;   /* live entries */
        size_t n_filled; /* live + tombstones: bounds probe lengths */
        bool borrowed;   /* the keys are the values' own strings: not copied, not freed */
};

/* FNV-1a: keys are short names and UIDs, not attacker-chosen at scale. */
static uint64_t hash_string(const char *s) {
        uint64_t h = UINT64_C(14695981039346656037);
        for (; *s; s++) {
                h ^= (unsigned char) *s;
                h *= UINT64_C(1099511628211);
        }
        return h;
}

Hashmap *hashmap_new(void) {
        return calloc(1, sizeof(Hashmap));
}

Hashmap *hashmap_new_borrowing(void) {
        Hashmap *h = hashmap_new();
        if (h)
                h->borrowed = true;
        return h;
}

static void key_free(const Hashmap *h, char *key) {
        if (!h->borrowed)
                free(key);
}

Hashmap *hashmap_free(Hashmap *h) {
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->capacity; i++)
                if (h->entries[i].key && h->entries[i].key != TOMBSTONE)
                        key_free(h, h->entries[i].key);
        free(h->entries);
        free(h);
        return NULL;
}

/* Index of key's entry, or of the slot where it would go (-1: table full). */
static ssize_t find_slot(const Hashmap *h, const char *key, uint64_t hash, bool *found) {
        ssize_t first_free = -1;

        *found = false;
        if (h->capacity == 0)
                return -1;
        for (size_t n = 0, i = hash & (h->capacity - 1); n < h->capacity; n++, i = (i + 1) & (h->capacity - 1)) {
                Entry *e = &h->entries[i];
                if (!e->key)
                        return first_free >= 0 ? first_free : (ssize_t) i;
                if (e->key == TOMBSTONE) {
                        if (first_free < 0)
                                first_free = (ssize_t) i;
                        continue;
                }
                if (e->hash == hash && streq(e->key, key)) {
                        *found = true;
                        return (ssize_t) i;
                }
        }
        return first_free;
}

static int resize(Hashmap *h, size_t capacity) {
        Entry *old = h->entries;
        size_t old_capacity = h->capacity;

        h->entries = calloc(capacity, sizeof(Entry));
        if (!h->entries) {
                h->entries = old;
                return -ENOMEM;
        }
        h->capacity = capacity;
        h->n_filled = h->n_used;
        for (size_t i = 0; i < old_capacity; i++) {
                Entry *e = &old[i];
                bool found;
                if (!e->key || e->key == TOMBSTONE)
                        continue;
                h->entries[find_slot(h, e->key, e->hash, &found)] = *e;
        }
        free(old);
        return 0;
}

int hashmap_put(Hashmap *h, const char *key, void *value, void **ret_old) {
        uint64_t hash = hash_string(key);
        bool found;
        ssize_t i;

        /* Keep the load (tombstones included) under 3/4.  Most maps hold one
         * entry for good (a volume's pods: one pod per volume of a pod's own)
         * or a few: they start at 2 slots, not 16 (0.6 MiB with 1,000
         * volumes) nor 4 (48 bytes more per volume). */
        if ((h->n_filled + 1) * 4 > h->capacity * 3) {
                size_t capacity = h->capacity ? h->capacity : 2;
                while ((h->n_used + 1) * 2 > capacity)
                        capacity *= 2;
                if (resize(h, capacity) < 0)
                        return -ENOMEM;
        }
        i = find_slot(h, key, hash, &found);
        if (found) {
                if (ret_old)
                        *ret_old = h->entries[i].value;
                h->entries[i].value = value;
                /* The replaced value may go, and its key with it. */
                if (h->borrowed)
                        h->entries[i].key = (char *) key;
                return 0;
        }
        char *copy = h->borrowed ? (char *) key : strdup(key);
        if (!copy)
                return -ENOMEM;
        if (h->entries[i].key != TOMBSTONE)
                h->n_filled++;
        h->entries[i] = (Entry){ .key = copy, .value = value, .hash = hash };
        h->n_used++;
        if (ret_old)
                *ret_old = NULL;
        return 0;
}

int hashmap_ensure_put(Hashmap **h, const char *key, void *value, void **ret_old) {
        if (!*h) {
                *h = hashmap_new();
                if (!*h)
                        return -ENOMEM;
        }
        return hashmap_put(*h, key, value, ret_old);
}

void *hashmap_get(const Hashmap *h, const char *key) {
        bool found;
        ssize_t i;

        /* No key is NULL: a volume of a kind without a driver looked up
         * among drivers is simply absent (it crashed a stats round). */
        if (!h || !key)
                return NULL;
        i = find_slot(h, key, hash_string(key), &found);
        return found ? h->entries[i].value : NULL;
}

void *hashmap_remove(Hashmap *h, const char *key) {
        bool found;
        ssize_t i;
        void *value;

        if (!h || !key)
                return NULL;
        i = find_slot(h, key, hash_string(key), &found);
        if (!found)
                return NULL;
        value = h->entries[i].value;
        key_free(h, h->entries[i].key);
        h->entries[i].key = TOMBSTONE;
        h->entries[i].value = NULL;
        h->n_used--;
        /* An emptied map gives its table back: most maps hold an entry for a
         * while (a volume's operation in flight, its backoffs) and then none
         * for good, and 1,000 volumes kept ~100 KiB of empty tables.  An
         * iteration that removed the last entry ends (capacity 0). */
        if (h->n_used == 0) {
                free(h->entries);
                h->entries = NULL;
                h->capacity = h->n_filled = 0;
        }
        return value;
}

size_t hashmap_size(const Hashmap *h) {
        return h ? h->n_used : 0;
}

size_t hashmap_capacity(const Hashmap *h) {
        return h ? h->capacity : 0;
}

bool hashmap_iterate(const Hashmap *h, size_t *state, const char **ret_key, void **ret_value) {
        if (!h)
                return false;
        for (; *state < h->capacity; (*state)++) {
                Entry *e = &h->entries[*state];
                if (!e->key || e->key == TOMBSTONE)
                        continue;
                if (ret_key)
                        *ret_key = e->key;
                if (ret_value)
                        *ret_value = e->value;
                (*state)++;
                return true;
        }
        return false;
}
