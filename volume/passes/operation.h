/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The operation frame (operations.c) as a kind's run entry sees it
 * (volume/kind.h): the frame made the operation's directories and intent
 * record, durable, before run; run goes step by step and ends the operation
 * through one of these, which record the outcome in the actual state, the
 * intent record, the backoff, the Events and the metrics. */

#include "systemd/log.h"
#include "systemd/macro.h"
#include "volume/internal.h"

/* Runs the operation's current step (the kind's run), unless root-dir is
 * not kvolumed's: then it waits (rootwatch.c). */
void operation_run(Operation *op);
/* The next step. */
void operation_next(Operation *op);
/* The end: success, or a failure with op->error and op->message set. */
void operation_finish(Operation *op, bool success);
/* Records why the operation failed and ends it; "uncertain": the volume
 * may be mounted. */
void operation_fail(Operation *op, int error, bool uncertain, const char *format, ...) _printf_(4, 5);
/* The journal fields of the operation's log lines. */
LogFields operation_fields(const Operation *op);
/* root-dir's path joined with "rel"; NULL: out of memory. */
char *operation_abs_path(const Operation *op, const char *rel);
/* A stage or unstage (node-wide), not a publish or unpublish. */
bool operation_staging(const Operation *op);
