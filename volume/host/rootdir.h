/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* File operations under root-dir that cannot escape it.  Every path is
 * relative to an open descriptor of root-dir and resolved with openat2()
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, so a symlink
 * planted anywhere on the way (by a driver, a pod or an attacker) makes the
 * operation fail with -ELOOP/-EXDEV instead of acting outside root-dir.
 * Removal is rmdir/unlink of single entries, never recursive. */

#include <sys/types.h>

#include "systemd/macro.h"
#include "systemd/testhook.h"
#include "volume/host/syncpool.h"

struct Hashmap;

typedef struct RootDir {
        int fd;
        char *path;
        /* What kvolumed changed below root-dir since the changes were last
         * taken (root_dir_take_changes): relpath -> ROOT_CHANGED_* bits; ""
         * is root-dir itself.  changed_all: too many to keep, or no memory
         * to keep one: only a syncfs() covers them. */
        struct Hashmap *changed;
        bool changed_all;
        /* tests: the rule before per-file durability, one syncfs() for all
         * (KVOLUMED_TEST_SYNCFS=1), for the durability bench's comparison. */
        bool sync_whole_fs;
        /* The threads of root_changes_sync(), for the life of root-dir. */
        SyncPool *sync_pool;
        /* The records' redo log (intentlog.h), once root_dir_replay_intents()
         * attached it; NULL: each record durable by itself.  The slots of the
         * records written since the last take, and whether one could not be
         * put in the log. */
        struct IntentLog *intents;
        uint32_t *logged;
        size_t n_logged, logged_allocated;
        bool unlogged;
        /* Takes whose slots a thread will free (rootsync.c; atomic): slots are
         * freed in the order taken, so root_dir_sync() frees none meanwhile. */
        unsigned later_pending;
} RootDir;

/* Opens root-dir, creating it (0750) when missing. */
int root_dir_open(const char *path, RootDir **ret);
/* root-dir as the lock opened it (volume/host/rootlock.h): path is its resolved
 * spelling, fd is duplicated, so that every file kvolumed writes goes to the
 * directory it locked, never to another found at the path later. */
int root_dir_open_fd(const char *path, int fd, RootDir **ret);
RootDir *root_dir_free(RootDir *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(RootDir *, root_dir_free);

/* Opens relpath below root-dir with open(2) flags (O_NOFOLLOW and O_CLOEXEC
 * added), for what the other functions do not cover: a file to bind-mount
 * onto through /proc/self/fd, a device to hold open. */
int root_dir_open_at(RootDir *r, const char *relpath, int flags, mode_t mode, int *ret_fd);

/* Opens a directory below root-dir (O_DIRECTORY|O_CLOEXEC, read-only). */
int root_dir_open_dir(RootDir *r, const char *relpath, int *ret_fd);

/* Creates relpath and its missing parents with "mode"; existing directories
 * are kept as they are.  Returns 1 when the last component was created, 0 when
 * it existed.  ret_fd, if not NULL, receives an O_PATH descriptor of it (for
 * the *at() calls): nothing is asked of a file system mounted on a component. */
int root_dir_mkdir_p(RootDir *r, const char *relpath, mode_t mode, int *ret_fd);

/* Writes a file atomically: a temporary file in the same directory, renamed
 * over relpath.  With "durable", the file and its directory are fsync'ed;
 * without, the file and its directory are noted as changed, and the caller
 * makes a batch durable at once (root_dir_take_changes, root_changes_sync). */
int root_dir_write_file(RootDir *r, const char *relpath, const void *data, size_t size, mode_t mode,
                        bool durable);

/* A record's copy in the intent log before its file is written, so that
 * the log is made durable (root_sync_kick) while its directories are made;
 * root_dir_write_logged_file() then writes the file, noted as changed, with
 * the same bytes.  Where the log cannot take it, the take's files are made
 * durable by themselves, as with root_dir_write_file(). */
void root_dir_log_ahead(RootDir *r, const char *relpath, const void *data, size_t size, mode_t mode);
int root_dir_write_logged_file(RootDir *r, const char *relpath, const void *data, size_t size, mode_t mode);

/* Reads a regular file of at most max_size bytes; NUL-terminated. */
int root_dir_read_file(RootDir *r, const char *relpath, size_t max_size, char **ret, size_t *ret_size);

/* Removes one empty directory / one non-directory entry.  -ENOENT is
 * returned as 0: removal is idempotent. */
int root_dir_rmdir(RootDir *r, const char *relpath);
int root_dir_unlink(RootDir *r, const char *relpath);

/* Renames one entry to another path below root-dir (over what is there). */
int root_dir_rename(RootDir *r, const char *from, const char *to);

/* 1 if relpath exists, 0 if not, -errno on other errors (ELOOP for a symlink). */
int root_dir_exists(RootDir *r, const char *relpath);

/* 1 if relpath is the root of a mount, 0 if not.  Asks nothing of a file
 * system mounted there (cached attributes only). */
int root_dir_is_mount_point(RootDir *r, const char *relpath);

/* Durability of exactly kvolumed's writes.  Every function above that
 * changes root-dir's tree notes what it changed: a file written, and each
 * directory whose entries changed (an entry created, renamed into place or
 * removed; a directory it created, for its own "." and ".."). */
enum {
        ROOT_CHANGED_FILE = 1 << 0,
        ROOT_CHANGED_DIR = 1 << 1,
};

/* What changed since the last take, as relpaths ("" is root-dir itself). */
typedef struct RootChanges {
        char **files, **dirs;
        size_t n_files, n_dirs;
        bool all;               /* too many kept, or out of memory: a syncfs() covers them */
        bool whole_fs;          /* tests: the syncfs() rule (RootDir.sync_whole_fs) */
        /* The intent log's slots of the records written, freed once the
         * records are durable by themselves; unlogged: a record is in no slot,
         * so the files themselves must be durable before the calls. */
        uint32_t *slots;
        size_t n_slots;
        bool unlogged;
} RootChanges;

/* Notes relpath (below root-dir, "" for root-dir itself) as changed, with
 * ROOT_CHANGED_FILE or ROOT_CHANGED_DIR, for a writer that works through
 * descriptors of its own instead of the functions above (the atomic writer's
 * note_changed callback, volume/host/atomicwriter.h): the pass's batched
 * sync then covers its writes like every other. */
void root_dir_note_changed(RootDir *r, const char *relpath, int kind);

/* Moves the notes into *ret and starts a new set: what is changed after this
 * call goes to the next take. */
void root_dir_take_changes(RootDir *r, RootChanges *ret);
void root_changes_done(RootChanges *c);

/* Makes the changes durable: fdatasync() of each file, then fsync() of each
 * directory, each opened beneath root_fd as the functions above open them;
 * what is gone since (removed by a later change) is skipped, as is a mount's
 * root (never ours, and its file system may not answer).  Waits for these
 * files and directories only, never for what other processes have dirty on
 * the same file system; c->all: one syncfs() instead.  Each round runs on
 * pool's threads (root-dir's sync_pool), one sync at a time.  Thread-safe:
 * it touches nothing but pool, root_fd and *c.  ret_failed (optional)
 * receives the first path that failed (freed by the caller). */
int root_changes_sync(SyncPool *pool, int root_fd, const RootChanges *c, char **ret_failed);

/* Makes every change so far durable, here: take and sync, then frees the
 * slots of the records taken.  For start-up and for when no thread can be
 * had. */
int root_dir_sync(RootDir *r);

/* Opens the intent log (INTENT_LOG_FILE, made when missing), writes back
 * each record it holds from another boot that is not on disk as the log has
 * it (a power loss took it), makes them durable, empties the log and
 * attaches it, for boot_id's slots: from here on, the records
 * root_dir_write_file() writes are put in it.  Before reconstruction reads
 * any record.  Returns the number of records written back; < 0 when one
 * could not be, or not made durable (the log keeps its slots).  A log that
 * cannot be opened or made is logged, and 0: every record is then made
 * durable by itself, as before the log. */
int root_dir_replay_intents(RootDir *r, const char *boot_id);

/* Tests: see rootdir.c; nothing in a build without test hooks. */
#if KVOLUMED_TEST_HOOKS
void root_test_hold_at(const char *hold);
#else
static inline void root_test_hold_at(const char *hold) {
}
#endif
#define root_test_hold(hook) root_test_hold_at(test_hook_getenv(hook))

/* Whether the records of these changes are durable once the intent log is
 * synced: every record written is in a slot, and no syncfs() is asked for. */
static inline bool root_changes_logged(const RootChanges *c) {
        return c->n_slots > 0 && !c->unlogged && !c->all && !c->whole_fs;
}
