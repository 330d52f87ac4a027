/* SPDX-License-Identifier: Apache-2.0 */
/* The intent log (volume/host/intentlog.h): what replay hands back after a
 * power loss, slot by slot, and root-dir's write-back through it. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "test/unit/tmptree.h"
#include "volume/host/intentlog.h"
#include "volume/host/paths.h"
#include "volume/host/rootdir.h"

static char base[] = "/tmp/kvolumed-intentlog-XXXXXX";
static int base_fd = -1;

static int setup(void **state) {
        assert_non_null(mkdtemp(base));
        base_fd = open(base, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        assert_true(base_fd >= 0);
        return 0;
}

static int teardown(void **state) {
        close(base_fd);
        assert_int_equal(tmptree_remove(base), 0);
        return 0;
}

typedef struct Seen {
        char paths[8][64];
        char data[8][64];
        unsigned n;
} Seen;

static int collect(const char *relpath, const void *data, size_t size, mode_t mode, void *userdata) {
        Seen *s = userdata;

        assert_true(s->n < 8);
        snprintf(s->paths[s->n], sizeof s->paths[0], "%s", relpath);
        snprintf(s->data[s->n], sizeof s->data[0], "%.*s", (int) size, (const char *) data);
        s->n++;
        return 0;
}

/* The boot the slots are written in, and the one after a power loss. */
#define BOOT "6f0c4bd8-3a3e-4b8e-9d55-0d7b6a1f2c11"
#define NEXT_BOOT "a3c1e2f0-5b7d-4c9a-8e6f-1d2b3c4d5e6f"

static IntentLog *opened(const char *name, const char *boot) {
        IntentLog *l = NULL;
        assert_true(intent_log_open(base_fd, name, boot, &l) >= 0);
        return l;
}

static IntentLog *fresh(const char *name) {
        return opened(name, BOOT);
}

/* What a start after a power loss writes back. */
static Seen replayed(const char *name) {
        IntentLog *l = opened(name, NEXT_BOOT);
        Seen s = {};
        assert_true(intent_log_replay(l, collect, &s) >= 0);
        intent_log_free(l);
        return s;
}

static void test_made_with_zeros_and_replays_nothing(void **state) {
        struct stat st;
        Seen s;

        IntentLog *l = NULL;

        assert_int_equal(intent_log_open(base_fd, "empty", BOOT, &l), 1); /* made */
        intent_log_free(l);
        assert_int_equal(intent_log_open(base_fd, "empty", BOOT, &l), 0); /* found */
        intent_log_free(l);
        assert_int_equal(fstatat(base_fd, "empty", &st, 0), 0);
        assert_int_equal(st.st_size, (off_t) INTENT_LOG_SLOT_SIZE * INTENT_LOG_SLOTS);
        assert_true(st.st_blocks * 512 >= st.st_size); /* written, not a hole */
        s = replayed("empty");
        assert_int_equal(s.n, 0);
        /* Emptying an empty log (every start after a clean stop) writes nothing. */
        struct stat after;
        l = fresh("empty");
        assert_int_equal(intent_log_replay(l, collect, &s), 0);
        assert_int_equal(intent_log_clear(l), 0);
        intent_log_free(l);
        assert_int_equal(fstatat(base_fd, "empty", &after, 0), 0);
        assert_true(after.st_mtim.tv_sec == st.st_mtim.tv_sec && after.st_mtim.tv_nsec == st.st_mtim.tv_nsec);
}

static void test_newest_slot_of_each_path_replayed_in_order(void **state) {
        IntentLog *l = fresh("order");
        Seen s;

        assert_int_equal(intent_log_put(l, "a/rec", "one", 3, 0640), 0);
        assert_int_equal(intent_log_put(l, "b/rec", "bee", 3, 0640), 1);
        assert_int_equal(intent_log_put(l, "a/rec", "two", 3, 0640), 2);
        assert_int_equal(intent_log_counts(l).live, 3);
        intent_log_free(l); /* a crash: nothing freed */
        s = replayed("order");
        assert_int_equal(s.n, 2);
        assert_string_equal(s.paths[0], "b/rec");
        assert_string_equal(s.data[0], "bee");
        assert_string_equal(s.paths[1], "a/rec");
        assert_string_equal(s.data[1], "two");
}

/* kvolumed killed and started again in the same boot: the files hold what
 * was last written to them (by whoever wrote last: a newer kvolumed rolled
 * back), and the log says nothing over them. */
static void test_slots_of_this_boot_are_not_written_back(void **state) {
        IntentLog *l = fresh("same-boot");
        Seen s = {};

        assert_int_equal(intent_log_put(l, "a/rec", "one", 3, 0640), 0);
        intent_log_free(l);
        l = opened("same-boot", BOOT);
        assert_int_equal(intent_log_replay(l, collect, &s), 0);
        assert_int_equal(s.n, 0);
        intent_log_free(l);
}

static void test_freed_and_torn_slots_say_nothing(void **state) {
        IntentLog *l = fresh("torn");
        char byte = 'X';
        Seen s;

        assert_int_equal(intent_log_put(l, "kept", "k", 1, 0640), 0);
        assert_int_equal(intent_log_put(l, "freed", "f", 1, 0640), 1);
        assert_int_equal(intent_log_put(l, "torn", "t-before", 8, 0640), 2);
        intent_log_release(l, (uint32_t[]){ 1 }, 1);
        assert_int_equal(intent_log_counts(l).live, 2);
        intent_log_free(l);
        /* A byte of the third record not as written: a power loss mid-write. */
        int fd = openat(base_fd, "torn", O_RDWR);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, &byte, 1, 2 * INTENT_LOG_SLOT_SIZE + 104 + 4 + 2), 1);
        close(fd);
        s = replayed("torn");
        assert_int_equal(s.n, 1);
        assert_string_equal(s.paths[0], "kept");
}

static void test_a_freed_slot_is_reused_and_a_full_log_refuses(void **state) {
        IntentLog *l = fresh("full");
        char big[INTENT_LOG_SLOT_SIZE] = {};

        for (unsigned i = 0; i < INTENT_LOG_SLOTS; i++)
                assert_int_equal(intent_log_put(l, "p", "x", 1, 0640), (int) i);
        assert_int_equal(intent_log_put(l, "p", "x", 1, 0640), -ENOSPC);
        intent_log_release(l, (uint32_t[]){ 7 }, 1);
        assert_int_equal(intent_log_put(l, "p", "x", 1, 0640), 7);
        /* A record larger than a slot: made durable by itself instead. */
        intent_log_release(l, (uint32_t[]){ 8 }, 1);
        assert_int_equal(intent_log_put(l, "p", big, sizeof big, 0640), -E2BIG);
        assert_int_equal(intent_log_clear(l), 0);
        assert_int_equal(intent_log_counts(l).live, 0);
        intent_log_free(l);
        assert_int_equal(replayed("full").n, 0);
}

static void test_a_log_of_another_size_is_made_anew(void **state) {
        int fd = openat(base_fd, "short", O_WRONLY | O_CREAT, 0600);
        struct stat st;

        assert_true(fd >= 0);
        assert_int_equal(write(fd, "KVINTENT", 8), 8);
        close(fd);
        IntentLog *l = NULL;
        assert_int_equal(intent_log_open(base_fd, "short", BOOT, &l), 1);
        intent_log_free(l);
        assert_int_equal(fstatat(base_fd, "short", &st, 0), 0);
        assert_int_equal(st.st_size, (off_t) INTENT_LOG_SLOT_SIZE * INTENT_LOG_SLOTS);
}

/* Through root-dir: a record written after the log is attached is in a
 * slot; lost from the disk, the next start writes it back, once; a record
 * the file holds as logged is left alone. */
static void test_root_dir_writes_back_what_the_disk_lost(void **state) {
        char root[200], *text = NULL;
        RootDir *r = NULL;
        RootChanges c;
        size_t size = 0;

        snprintf(root, sizeof root, "%s/root", base);
        assert_int_equal(root_dir_open(root, &r), 0);
        assert_int_equal(root_dir_replay_intents(r, BOOT), 0);
        assert_int_equal(root_dir_mkdir_p(r, "kvolumed/pods/u/v", 0750, NULL), 1);
        assert_int_equal(root_dir_write_file(r, "kvolumed/pods/u/v/kvolumed.json", "{\"a\":1}", 7, 0640, false), 0);
        assert_int_equal(root_dir_write_file(r, "kvolumed/pods/u/kept.json", "{}", 2, 0640, false), 0);
        /* A slot naming no record (the log holds nothing else): never written. */
        assert_true(intent_log_put(r->intents, "kvolumed/pods/u/not-a-record", "x", 1, 0640) >= 0);
        root_dir_take_changes(r, &c);
        assert_int_equal(c.n_slots, 2);
        assert_false(c.unlogged);
        assert_true(root_changes_logged(&c));
        root_changes_done(&c);
        root_dir_free(r); /* killed before the records' own sync */

        assert_int_equal(unlinkat(base_fd, "root/kvolumed/pods/u/v/kvolumed.json", 0), 0);
        assert_int_equal(unlinkat(base_fd, "root/kvolumed/pods/u/v", AT_REMOVEDIR), 0);
        assert_int_equal(root_dir_open(root, &r), 0);
        assert_int_equal(root_dir_replay_intents(r, NEXT_BOOT), 1);
        assert_int_equal(root_dir_read_file(r, "kvolumed/pods/u/v/kvolumed.json", 4096, &text, &size), 0);
        assert_int_equal(size, 7);
        assert_memory_equal(text, "{\"a\":1}", 7);
        free(text);
        assert_int_equal(faccessat(base_fd, "root/kvolumed/pods/u/not-a-record", F_OK, 0), -1);
        root_dir_free(r);
        /* Emptied once durable: nothing to write back the next time. */
        assert_int_equal(root_dir_open(root, &r), 0);
        assert_int_equal(root_dir_replay_intents(r, NEXT_BOOT), 0);
        root_dir_free(r);
}

/* A sync writes only when a put or a free came after the last sync that
 * returned: the pass's own sync after an early one (rootsync.c's kick)
 * costs nothing, and one with something new still writes. */
static void test_a_sync_with_nothing_new_writes_nothing(void **state) {
        IntentLog *l = fresh("seq");
        int slot;

        assert_int_equal(intent_log_counts(l).fdatasyncs, 0);
        assert_int_equal(intent_log_sync(l), 0);
        assert_int_equal(intent_log_counts(l).fdatasyncs, 0);
        slot = intent_log_put(l, "a", "x", 1, 0640);
        assert_true(slot >= 0);
        assert_int_equal(intent_log_sync(l), 0);
        assert_int_equal(intent_log_counts(l).fdatasyncs, 1);
        assert_int_equal(intent_log_sync(l), 0);
        assert_int_equal(intent_log_counts(l).fdatasyncs, 1);
        /* A free is a write too: durable at the next sync. */
        intent_log_release(l, (uint32_t[]){ (uint32_t) slot }, 1);
        assert_int_equal(intent_log_sync(l), 0);
        assert_int_equal(intent_log_counts(l).fdatasyncs, 2);
        assert_true(intent_log_put(l, "b", "y", 1, 0640) >= 0);
        assert_int_equal(intent_log_sync(l), 0);
        assert_int_equal(intent_log_counts(l).fdatasyncs, 3);
        intent_log_free(l);
}

/* Logged ahead of its file (operations.c): the slot is taken with the
 * pass's changes, the file written after is noted as changed but not put
 * in the log a second time, and a log-less root-dir makes the take's files
 * durable by themselves. */
static void test_a_record_logged_ahead_is_in_one_slot(void **state) {
        char root[200];
        RootDir *r = NULL;
        RootChanges c;

        snprintf(root, sizeof root, "%s/ahead", base);
        assert_int_equal(root_dir_open(root, &r), 0);
        assert_int_equal(root_dir_replay_intents(r, BOOT), 0);
        root_dir_log_ahead(r, "kvolumed/pods/u/v/kvolumed.json", "{\"a\":1}", 7, 0640);
        assert_int_equal(intent_log_counts(r->intents).live, 1);
        assert_int_equal(root_dir_mkdir_p(r, "kvolumed/pods/u/v", 0750, NULL), 1);
        assert_int_equal(root_dir_write_logged_file(r, "kvolumed/pods/u/v/kvolumed.json", "{\"a\":1}", 7, 0640), 0);
        assert_int_equal(intent_log_counts(r->intents).live, 1);
        root_dir_take_changes(r, &c);
        assert_int_equal(c.n_slots, 1);
        assert_true(c.n_files >= 1);
        assert_true(root_changes_logged(&c));
        root_changes_done(&c);
        root_dir_free(r);

        /* No log: the record is noted, the take not logged. */
        snprintf(root, sizeof root, "%s/ahead-nolog", base);
        assert_int_equal(root_dir_open(root, &r), 0);
        root_dir_log_ahead(r, "kvolumed.json", "{}", 2, 0640);
        assert_int_equal(root_dir_write_logged_file(r, "kvolumed.json", "{}", 2, 0640), 0);
        root_dir_take_changes(r, &c);
        assert_int_equal(c.n_slots, 0);
        assert_int_equal(c.n_files, 1);
        assert_false(root_changes_logged(&c));
        root_changes_done(&c);
        root_dir_free(r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_made_with_zeros_and_replays_nothing),
                cmocka_unit_test(test_newest_slot_of_each_path_replayed_in_order),
                cmocka_unit_test(test_slots_of_this_boot_are_not_written_back),
                cmocka_unit_test(test_freed_and_torn_slots_say_nothing),
                cmocka_unit_test(test_a_freed_slot_is_reused_and_a_full_log_refuses),
                cmocka_unit_test(test_a_log_of_another_size_is_made_anew),
                cmocka_unit_test(test_root_dir_writes_back_what_the_disk_lost),
                cmocka_unit_test(test_a_sync_with_nothing_new_writes_nothing),
                cmocka_unit_test(test_a_record_logged_ahead_is_in_one_slot),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
