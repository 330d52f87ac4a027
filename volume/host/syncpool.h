/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The threads that make root-dir's changes durable (rootdir.c), kept for
 * the life of kvolumed instead of started for each sync: starting and
 * joining seven threads for each round of a sync cost more than its fsyncs
 * on a fast disk (0.4 ms a round, issue 31).  Started at the first run
 * (named "kv-sync-pool"), blocked on a condition variable in between (no
 * wake-up at rest), joined by sync_pool_free(). */

#include <stddef.h>

#include "systemd/macro.h"

/* At most this many items run at once, the caller's thread included. */
#define SYNC_POOL_THREADS 8

typedef struct SyncPool SyncPool;

int sync_pool_new(SyncPool **ret);
/* Joins the threads: no run may be in progress. */
SyncPool *sync_pool_free(SyncPool *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(SyncPool *, sync_pool_free);

/* Calls fn(i, data) once for each i in [0, n), on the caller's thread and
 * the pool's together, and returns when every call returned.  One run at a
 * time (a second caller waits for the first); without the pool's threads
 * (none could be started) the caller makes every call. */
typedef void (*sync_pool_fn_t)(size_t i, void *data);
void sync_pool_run(SyncPool *p, size_t n, sync_pool_fn_t fn, void *data);

/* Threads started so far (tests). */
size_t sync_pool_threads(SyncPool *p);
