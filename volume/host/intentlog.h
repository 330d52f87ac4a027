/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The intent log: how a record becomes durable before the CSI call that
 * depends on it without a journal commit of root-dir's file system.
 *
 * A record (kvolumed.json, vol_data.json) written by a pass is also copied,
 * path and bytes, into a slot of this file, one file of fixed size under
 * root-dir, written with zeros once when it is made, so that writing a slot
 * again changes no metadata: its fdatasync() is a data write and a cache
 * flush, never a commit of the file system's journal, which waits for what
 * every other writer of /var has dirty (ext4 data=ordered) and measured
 * 0.66 ms for one new file on a quiet disk against 0.10 ms for this.  One
 * fdatasync() of the log covers every record of a pass; the records
 * themselves and the directories naming them are made durable after the
 * calls started (rootsync.c), and then their slots are freed.
 *
 * After a power loss, root_dir_replay_intents() (rootdir.h) writes back,
 * for each path, the newest slot still live, before reconstruction reads
 * any record: a record is on disk as it was last written, or in the log.
 * Only slots of another boot: within a boot (kvolumed killed, restarted) the
 * page cache holds every record as last written, by kvolumed or by whoever
 * wrote it since (a newer kvolumed, rolled back), and nothing is replayed.
 * Slots are freed in the order they were written (one background sync at a
 * time), and a free is made durable by the log's next fdatasync(), which
 * covers every earlier free too: a stale slot never outlives a newer one of
 * its path.  A slot that a power loss tore fails its checksum and is
 * ignored: its fdatasync() never returned, so no call depended on it.
 *
 * Thread-safe: slots are written on the loop and freed by the sync thread. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "systemd/macro.h"

#define INTENT_LOG_SLOT_SIZE 4096u
/* 1 MiB: the records of the passes whose directories are not durable yet.
 * A pass that finds no free slot (a burst, or a disk that stalls) makes its
 * records durable file by file instead, as before the log. */
#define INTENT_LOG_SLOTS 256u

typedef struct IntentLog IntentLog;

/* Opens the log, the file name in dir_fd (a directory resolved beneath
 * root-dir), making it (zeros, then fsync of it and of its directory) when
 * it is missing or of another size: then 1.  boot_id: this boot's
 * (/proc/sys/kernel/random/boot_id), kept in each slot. */
int intent_log_open(int dir_fd, const char *name, const char *boot_id, IntentLog **ret);
IntentLog *intent_log_free(IntentLog *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(IntentLog *, intent_log_free);

/* Calls fn for the newest live slot of each path, oldest first, when it was
 * written in another boot; returns the number of records handed over, or
 * fn's first error. */
typedef int (*intent_log_replay_fn)(const char *relpath, const void *data, size_t size, mode_t mode,
                                    void *userdata);
int intent_log_replay(IntentLog *l, intent_log_replay_fn fn, void *userdata);
/* Frees every live slot (those replay found, those put since), durably:
 * once what was replayed is durable itself.  Nothing to write when none. */
int intent_log_clear(IntentLog *l);

/* Copies a record into a free slot; returns the slot's index, -ENOSPC when
 * none is free (or a free failed: the log is given up), -E2BIG when the
 * record does not fit in one. */
int intent_log_put(IntentLog *l, const char *relpath, const void *data, size_t size, mode_t mode);
/* Makes every slot written so far, and every free, durable: one
 * fdatasync(), none when an earlier one that returned covered them all.
 * Any thread; a failure is returned to the caller whose call failed, and
 * the next sync writes again. */
int intent_log_sync(IntentLog *l);
/* Whether every slot written and freed so far is durable: a sync that
 * returned covers them all. */
bool intent_log_durable(IntentLog *l);

/* Frees slots (their record is durable by itself); durable at the next sync. */
void intent_log_release(IntentLog *l, const uint32_t *slots, size_t n);
/* Tests: the slots in use, the fdatasync() calls made. */
typedef struct IntentLogCounts {
        size_t live;
        unsigned fdatasyncs;
} IntentLogCounts;
IntentLogCounts intent_log_counts(IntentLog *l);
