/* SPDX-License-Identifier: Apache-2.0 */
/* The rolling resync's order: every item present for a whole round is taken
 * exactly once, whatever is added or removed between its slices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "volume/passes/resync.h"

#define N_ITEMS 3000

typedef struct Item {
        ResyncLink link;
        bool present;       /* in the list */
        bool whole_round;   /* in the list since the round began, and still */
        unsigned taken;     /* in this round */
} Item;

static Item items[N_ITEMS];

static Item *item_of(ResyncLink *k) {
        return (Item *) ((char *) k - offsetof(Item, link));
}

static void reset(ResyncList *l) {
        *l = (ResyncList) {};
        for (size_t i = 0; i < N_ITEMS; i++)
                items[i] = (Item) {};
}

/* An item added again stands for a new pod or volume (a new allocation in
 * manager.c): what it was taken as before does not count. */
static void add(ResyncList *l, Item *it) {
        resync_list_add(l, &it->link);
        it->present = true;
        it->taken = 0;
}

static void del(ResyncList *l, Item *it) {
        resync_list_remove(l, &it->link);
        it->present = false;
        it->whole_round = false;
}

/* One slice: at most RESYNC_SLICE_ITEMS, none taken twice, none absent. */
static size_t slice(ResyncList *l) {
        size_t n = 0;
        ResyncLink *k;

        for (; n < RESYNC_SLICE_ITEMS && (k = resync_list_take(l)); n++) {
                Item *it = item_of(k);
                assert_true(it->present);
                assert_true(k->linked);
                it->taken++;
                assert_int_equal(it->taken, 1);
        }
        return n;
}

static void round_begin(ResyncList *l) {
        resync_list_rewind(l);
        for (size_t i = 0; i < N_ITEMS; i++) {
                items[i].taken = 0;
                items[i].whole_round = items[i].present;
        }
}

static void test_a_quiet_round_takes_each_once_in_its_slices(void **state) {
        ResyncList l;
        size_t slices = 0, n;

        reset(&l);
        assert_int_equal(resync_slices_for(0, RESYNC_SLICE_ITEMS), 1);
        round_begin(&l);
        assert_int_equal(slice(&l), 0);
        assert_true(resync_list_done(&l));
        for (size_t i = 0; i < 1000; i++)
                add(&l, &items[i]);
        assert_int_equal(l.n, 1000);
        for (unsigned r = 0; r < 3; r++) {
                round_begin(&l);
                slices = 0;
                while (!resync_list_done(&l)) {
                        n = slice(&l);
                        assert_true(n > 0 && n <= RESYNC_SLICE_ITEMS);
                        slices++;
                }
                assert_int_equal(slices, resync_slices_for(1000, RESYNC_SLICE_ITEMS));
                for (size_t i = 0; i < 1000; i++)
                        assert_int_equal(items[i].taken, 1);
        }
}

static void test_churn_between_slices(void **state) {
        ResyncList l;

        srand(31);
        reset(&l);
        for (size_t i = 0; i < N_ITEMS / 2; i++)
                add(&l, &items[i]);
        for (unsigned r = 0; r < 50; r++) {
                round_begin(&l);
                while (!resync_list_done(&l)) {
                        (void) slice(&l);
                        /* Between slices, pods and volumes come and go:
                         * some of them just behind or at the cursor. */
                        for (unsigned c = 0; c < 200; c++) {
                                Item *it = &items[rand() % N_ITEMS];
                                if (it->present)
                                        del(&l, it);
                                else
                                        add(&l, it);
                        }
                        if (l.cursor && rand() % 2)
                                del(&l, item_of(l.cursor));
                }
                for (size_t i = 0; i < N_ITEMS; i++) {
                        if (items[i].whole_round)
                                assert_int_equal(items[i].taken, 1);
                        assert_true(items[i].taken <= 1);
                }
        }
        /* The count and the links agree after all of it. */
        size_t n = 0;
        for (ResyncLink *k = l.head; k; k = k->next, n++)
                assert_true(item_of(k)->present);
        assert_int_equal(n, l.n);
        for (size_t i = 0; i < N_ITEMS; i++)
                n -= items[i].present;
        assert_int_equal(n, 0);
}

static void test_removing_twice_or_adding_twice_is_harmless(void **state) {
        ResyncList l;

        reset(&l);
        add(&l, &items[0]);
        add(&l, &items[0]);
        add(&l, &items[1]);
        assert_int_equal(l.n, 2);
        del(&l, &items[0]);
        del(&l, &items[0]);
        assert_int_equal(l.n, 1);
        assert_ptr_equal(l.head, &items[1].link);
        assert_ptr_equal(l.tail, &items[1].link);
        del(&l, &items[1]);
        assert_null(l.head);
        assert_null(l.tail);
        assert_int_equal(l.n, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_quiet_round_takes_each_once_in_its_slices),
                cmocka_unit_test(test_churn_between_slices),
                cmocka_unit_test(test_removing_twice_or_adding_twice_is_harmless),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
