/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The mount points under root-dir, from /proc/self/mountinfo (three fields
 * of each line, read by mountinfo_parse_line()), kept current by libmount's
 * kernel monitor on the event loop.  Reading mountinfo costs the kernel real
 * work per line, so a burst of mount changes is read once per
 * MOUNT_TABLE_REFRESH_USEC (sooner when mount_table_refresh_soon() asks), at
 * idle priority, and the owner is told after each read, to compare what it
 * holds mounted with what is. */

#include <systemd/sd-event.h>

#include "systemd/macro.h"

#include <sys/types.h>

typedef struct MountTable MountTable;

typedef struct MountEntry {
        char *target;
        dev_t devno; /* st_dev of the mounted file system: shared by its bind mounts */
        int id;      /* mountinfo's mount ID */
} MountEntry;

#define MOUNT_TABLE_REFRESH_USEC (200 * USEC_PER_MSEC)

/* Called after the table was read again because mounts changed. */
typedef void (*mount_table_changed_t)(MountTable *t, void *userdata);

/* Only mounts below root_dir (absolute) are tracked. */
int mount_table_new(sd_event *event, const char *root_dir, mount_table_changed_t changed, void *userdata,
                    MountTable **ret);
MountTable *mount_table_free(MountTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(MountTable *, mount_table_free);

/* One line of /proc/self/mountinfo (without its newline): the mount ID,
 * the device, and the mount point unescaped (free it).  -EBADMSG for a line
 * that is not one. */
int mountinfo_parse_line(const char *line, size_t len, int *ret_id, dev_t *ret_devno, char **ret_target);

/* Re-reads the table now (the monitor does this on its own). */
int mount_table_refresh(MountTable *t);
/* Re-reads the table within usec, and tells the owner: one read however many
 * ask and however many mounts change meanwhile. */
void mount_table_refresh_soon(MountTable *t, uint64_t usec);

/* Whether abs_path is a mount target; mounts stacked on it count once. */
bool mount_table_is_mounted(MountTable *t, const char *abs_path);
/* The mount at abs_path (the top one where mounts are stacked), or NULL. */
const MountEntry *mount_table_get(MountTable *t, const char *abs_path);
/* The other mount targets under root-dir of the file system mounted at
 * abs_path (same device: bind mounts of it, or mounts of the same block
 * device), kubelet's GetDeviceMountRefs.  Stacked mounts count, on either
 * side, not only the top one: a bind of the staged file system hidden under
 * another mount still holds it.  Fills at most max of them into ret
 * (borrowed until the next refresh) and returns how many targets there are. */
size_t mount_table_other_mounts(MountTable *t, const char *abs_path, const char **ret, size_t max);
/* Mount targets under root-dir (not counting root-dir itself). */
size_t mount_table_count(MountTable *t);
/* The i-th target, sorted; for listing and tests. */
const char *mount_table_target(MountTable *t, size_t i);
