/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The mount points under root-dir, from /proc/self/mountinfo through libmount,
 * kept current by libmount's kernel monitor on the event loop.  Reading
 * mountinfo costs the kernel real work per line, so a burst of mount changes
 * is read once per MOUNT_TABLE_REFRESH_USEC, and the owner is told after
 * each read, to compare what it holds mounted with what is. */

#include <systemd/sd-event.h>

#include "systemd/macro.h"

typedef struct MountTable MountTable;

#define MOUNT_TABLE_REFRESH_USEC (200 * USEC_PER_MSEC)

/* Called after the table was read again because mounts changed. */
typedef void (*mount_table_changed_t)(MountTable *t, void *userdata);

/* Only mounts below root_dir (absolute) are tracked. */
int mount_table_new(sd_event *event, const char *root_dir, mount_table_changed_t changed, void *userdata,
                    MountTable **ret);
MountTable *mount_table_free(MountTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(MountTable *, mount_table_free);

/* Re-reads the table now (the monitor does this on its own). */
int mount_table_refresh(MountTable *t);

/* Whether abs_path is a mount target; mounts stacked on it count once. */
bool mount_table_is_mounted(MountTable *t, const char *abs_path);
/* Mount targets under root-dir (not counting root-dir itself). */
size_t mount_table_count(MountTable *t);
/* The i-th target, sorted; for listing and tests. */
const char *mount_table_target(MountTable *t, size_t i);
