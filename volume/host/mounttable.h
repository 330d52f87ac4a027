/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The mount points under root-dir, from one of two sources, chosen at start:
 *  - the kernel (Linux 6.15+): fanotify reports each mount attached to or
 *    detached from our mount namespace with its ID, statmount(2) answers
 *    what that one mount is, and listmount(2) lists the namespace's mount IDs
 *    (at start, and should the event queue ever overflow).  A change costs
 *    the kernel work for that mount only, however many the node has;
 *  - /proc/self/mountinfo (older kernels, or [agent] mount-source =
 *    mountinfo): three fields of each line, read by mountinfo_parse_line(),
 *    the whole table again after libmount's monitor says it changed.
 * Both give the same answers to every query below.  The owner is told after
 * mounts under root-dir changed, once per MOUNT_TABLE_REFRESH_USEC for a
 * burst, at idle priority so that work that came in goes first, but never
 * later than MOUNT_TABLE_MAX_DELAY_USEC after the change however busy the
 * loop is: a lost mount is noticed within that bound. */

#include <systemd/sd-event.h>

#include "systemd/hashmap.h"
#include "systemd/macro.h"

#include <sys/types.h>

typedef struct MountTable MountTable;

typedef struct MountEntry {
        char *target;
        dev_t devno; /* st_dev of the mounted file system: shared by its bind mounts */
        int id;      /* mountinfo's mount ID (reused by the kernel) */
        /* The order the kernel attached the mounts in, for mounts stacked on
         * one target (the last one shows): the 64-bit mount ID that is never
         * reused (the kernel path), or the mountinfo line's index (the
         * kernel writes the lines in that same order). */
        uint64_t seq;
} MountEntry;

#define MOUNT_TABLE_REFRESH_USEC (200 * USEC_PER_MSEC)
/* However busy the loop, the owner hears of a change within this. */
#define MOUNT_TABLE_MAX_DELAY_USEC (1 * USEC_PER_SEC)

typedef enum MountSource {
        MOUNT_SOURCE_AUTO,      /* the kernel's mount events where it has them, else mountinfo */
        MOUNT_SOURCE_MOUNTINFO, /* mountinfo, whatever the kernel has */
} MountSource;

/* Called after the table was read again because mounts changed, or
 * because the owner asked (mount_table_refresh_soon()).  changed: the
 * targets (absolute, the keys) whose mounts changed since the owner was
 * last told (mounted, unmounted, a mount stacked on or taken off them),
 * possibly none; NULL when the table cannot say which (out of memory):
 * then anything may have changed.  Both sources give the same set: the
 * kernel path from each attach and detach event, mountinfo by comparing
 * the table read with the one before. */
typedef void (*mount_table_changed_t)(MountTable *t, const Hashmap *changed, void *userdata);

/* Only mounts below root_dir (absolute) are tracked.  Logs once, at info,
 * which source it uses and why. */
int mount_table_new(sd_event *event, const char *root_dir, MountSource source, mount_table_changed_t changed,
                    void *userdata, MountTable **ret);
MountTable *mount_table_free(MountTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(MountTable *, mount_table_free);

/* One line of /proc/self/mountinfo (without its newline): the mount ID,
 * the device, and the mount point unescaped (free it).  -EBADMSG for a line
 * that is not one. */
int mountinfo_parse_line(const char *line, size_t len, int *ret_id, dev_t *ret_devno, char **ret_target);

/* "kernel" (fanotify, statmount, listmount) or "mountinfo": for /volumes. */
const char *mount_table_source(MountTable *t);

/* Brings the table up to date now (the monitor does this on its own): on
 * the kernel path, the mount events queued so far (a mount a CSI call made
 * is queued before the call returns), on mountinfo, the whole table. */
int mount_table_refresh(MountTable *t);
/* Re-reads the table within usec, and tells the owner: one read however many
 * ask and however many mounts change meanwhile. */
void mount_table_refresh_soon(MountTable *t, uint64_t usec);

/* Whether abs_path is a mount target; mounts stacked on it count once.
 * The table's answer only: see mount_table_mounted() before deciding that
 * nothing is mounted there. */
bool mount_table_is_mounted(MountTable *t, const char *abs_path);
/* Whether something is mounted at abs_path, for a decision that must not
 * take a mount for absent: the table's "yes", or its "no" checked against
 * the kernel for that path.  No event reports the rename of a directory
 * above a mount point (fanotify's mount events do not; mountinfo's poll
 * does not wake), so the table can hold a mount under the name its path had
 * when last read, and its new name then looks unmounted.  The check opens
 * the path O_PATH and asks statx() whether it is the root of a mount, with
 * AT_STATX_DONT_SYNC: the VFS answers, the file system mounted there is not
 * asked (a dead NFS server or FUSE daemon cannot hang the loop).  Where the
 * kernel contradicts the table, the whole table is read again soon (the
 * owner hears of what moved).  1 mounted, 0 nothing mounted (or no such
 * path), -errno when the kernel could not say: take that for mounted. */
int mount_table_mounted(MountTable *t, const char *abs_path);
/* Reads the whole table again from its source, whatever the events said:
 * a listing of every mount on the kernel path (listmount, statmount of
 * each), the whole of mountinfo on the other.  For the unstage guard, which
 * must see every mount of the staged file system under root-dir by its
 * current path, including one whose directory was renamed into root-dir
 * after it was mounted elsewhere. */
int mount_table_reload(MountTable *t);
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
