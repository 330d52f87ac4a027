/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The rolling resync's order (manager.c): the safety net walks the node's
 * pods and volumes a slice at a time, spread over resync-interval, so that
 * no pass of it grows with the node (issue 31: the full pass it was cost
 * ~70 ms beside 10,000 volumes, and the pod created meanwhile waited).
 *
 * A ResyncList is an intrusive list, in the order items were added, with a
 * cursor: a round rewinds the cursor to the head, each slice takes the next
 * items.  An item present for the whole round is taken exactly once; one
 * added meanwhile is appended after the cursor (taken at most once: its own
 * event planned it anyway); one removed is never taken again, and removing
 * the item under the cursor moves the cursor on.  No walk over the list:
 * each call costs what it returns. */

#include <stdbool.h>
#include <stddef.h>

typedef struct ResyncLink {
        struct ResyncLink *prev, *next;
        bool linked;
} ResyncLink;

typedef struct ResyncList {
        ResyncLink *head, *tail;
        ResyncLink *cursor; /* the next item a slice takes; NULL: none left in this round */
        size_t n;
} ResyncList;

void resync_list_add(ResyncList *l, ResyncLink *k);
/* Harmless for an item not linked (never added, or removed already). */
void resync_list_remove(ResyncList *l, ResyncLink *k);
/* A round begins: every item is to be taken again. */
void resync_list_rewind(ResyncList *l);
/* The next item of the round (and moves past it); NULL: the round took all. */
ResyncLink *resync_list_take(ResyncList *l);
static inline bool resync_list_done(const ResyncList *l) {
        return !l->cursor;
}

/* Volumes per slice: as many volumes, and pods until their volumes add up
 * to as many (a pod without any counts one).  A slice's pass then costs
 * about what a burst of that many pods' events does, a few milliseconds. */
#define RESYNC_SLICE_ITEMS 256

/* How many slices of per_slice items a round of n items takes (at least one). */
static inline size_t resync_slices_for(size_t n, size_t per_slice) {
        return n == 0 ? 1 : (n + per_slice - 1) / per_slice;
}
