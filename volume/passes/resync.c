/* SPDX-License-Identifier: Apache-2.0 */
#include "volume/passes/resync.h"

void resync_list_add(ResyncList *l, ResyncLink *k) {
        if (k->linked)
                return;
        k->prev = l->tail;
        k->next = NULL;
        if (l->tail)
                l->tail->next = k;
        else
                l->head = k;
        l->tail = k;
        k->linked = true;
        l->n++;
}

void resync_list_remove(ResyncList *l, ResyncLink *k) {
        if (!k->linked)
                return;
        /* The cursor never points at a freed item: it moves on. */
        if (l->cursor == k)
                l->cursor = k->next;
        if (k->prev)
                k->prev->next = k->next;
        else
                l->head = k->next;
        if (k->next)
                k->next->prev = k->prev;
        else
                l->tail = k->prev;
        k->prev = k->next = NULL;
        k->linked = false;
        l->n--;
}

void resync_list_rewind(ResyncList *l) {
        l->cursor = l->head;
}

ResyncLink *resync_list_take(ResyncList *l) {
        ResyncLink *k = l->cursor;
        if (k)
                l->cursor = k->next;
        return k;
}
