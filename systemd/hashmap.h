/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A map from strings to pointers: open addressing with linear probing.  Keys
 * are copied (but see hashmap_new_borrowing()); values are the caller's.
 * Iteration order is unspecified, and removing during iteration is allowed
 * only for the current entry (hashmap_iterate + hashmap_remove of the key
 * just returned). */

#include <stddef.h>

#include "systemd/macro.h"

typedef struct Hashmap Hashmap;

Hashmap *hashmap_new(void);
/* A map whose keys are strings its values own (a volume's unique name, a
 * publish's pod UID): put stores the key pointer, not a copy, and nothing
 * frees it.  The key passed to hashmap_put() must live as long as its entry
 * (the entry goes before its value does); a 1,000-volume node kept ~50 KiB
 * of copies of names its values already held (issue 31, memory). */
Hashmap *hashmap_new_borrowing(void);
/* Frees the map and its keys; values are left to the caller.  Every
 * function but hashmap_put() takes a NULL map as an empty one. */
Hashmap *hashmap_free(Hashmap *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(Hashmap *, hashmap_free);

/* Adds or replaces; *ret_old (optional) receives a replaced value. 0 or -ENOMEM. */
int hashmap_put(Hashmap *h, const char *key, void *value, void **ret_old);
/* hashmap_put() into *h, made on the first put: a map that is most often
 * empty costs nothing until then (every reader takes a NULL map as empty). */
int hashmap_ensure_put(Hashmap **h, const char *key, void *value, void **ret_old);
/* A NULL key is never in a map: get and remove answer NULL. */
void *hashmap_get(const Hashmap *h, const char *key);
/* Removes the entry and returns its value (NULL when absent). */
void *hashmap_remove(Hashmap *h, const char *key);
size_t hashmap_size(const Hashmap *h);
/* Slots in its table (0: none allocated, as for a new or emptied map). */
size_t hashmap_capacity(const Hashmap *h);

/* for (size_t i = 0; hashmap_iterate(h, &i, &key, &value);) ... */
bool hashmap_iterate(const Hashmap *h, size_t *state, const char **ret_key, void **ret_value);
