/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* One piece of work that may block on a file system (a stat or mkdir of a
 * host path on NFS, a mount, a walk of a volume) run on a thread of its own,
 * its result handed back on the event loop: DESIGN's rule that nothing which
 * can block on a file system someone else serves runs on the loop.  As
 * host/fsgroup.c does for its walk, but a thread: the work is short and
 * returns a message, and a thread stuck in a dead file system costs a stack,
 * not the loop. */

#include <systemd/sd-event.h>

typedef struct OffloopJob OffloopJob;

/* Runs on the thread: touches only "data" (and the file system).  Returns 0
 * or -errno; *ret_error (malloc'd, optional) is the message of a failure. */
typedef int (*offloop_work_t)(void *data, char **ret_error);
/* Called once on the loop when the work ended, never from inside
 * offloop_start(); "error" is the work's message (NULL: none), the
 * callee's to free.  The caller frees the job (offloop_free), here or
 * later. */
typedef void (*offloop_done_t)(OffloopJob *j, int result, char *error, void *userdata);

/* data_free (may be NULL) frees data when the job is freed, or when a job
 * freed while its work still runs ends. */
int offloop_start(sd_event *event, const char *description, offloop_work_t work, void *data,
                  void (*data_free)(void *), offloop_done_t done, void *userdata, OffloopJob **ret);
/* Frees the job; a job whose work still runs is abandoned: "done" is not
 * called, the thread frees what is left when the work returns. */
OffloopJob *offloop_free(OffloopJob *j);
