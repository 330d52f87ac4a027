/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The kernel's own answers about mounts (Linux 6.8+ for statmount(2) and
 * listmount(2), 6.15+ for fanotify's mount events of a namespace): the
 * kernel path of the mount table (volume/host/mounttable.c), kept apart from
 * what the table does with the answers.  The constants and structures come
 * from systemd/linux-mount-api.h, Debian 12's headers lacking them. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A fanotify descriptor (non-blocking) that reports every mount attached to
 * or detached from our mount namespace, after checking that statmount and
 * listmount answer too.  -errno when the kernel lacks any of them (the
 * reason, for the log, in *ret_why: a static string). */
int mount_events_open(int *ret_fd, const char **ret_why);

/* What one mount event says. */
typedef enum MountEventKind {
        MOUNT_EVENT_ATTACH, /* attached, or moved (then its old place is gone too) */
        MOUNT_EVENT_DETACH,
        MOUNT_EVENT_OVERFLOW, /* events were lost: list every mount again */
} MountEventKind;

typedef int (*mount_event_t)(MountEventKind kind, uint64_t mnt_id, void *userdata);

/* Reads the events queued on fd until none is left, calling handler for
 * each.  Returns how many there were, or -errno. */
int mount_events_read(int fd, mount_event_t handler, void *userdata);

/* A buffer for statmount() answers, grown when a path needs it. */
typedef struct StatmountBuffer {
        void *data;
        size_t size;
} StatmountBuffer;

void statmount_buffer_done(StatmountBuffer *b);

/* The mount mnt_id: its mount point (in b, valid until the next call),
 * its file system's device, and the old (mountinfo) ID.  -ENOENT when it is
 * gone (or in another namespace). */
int mount_stat(StatmountBuffer *b, uint64_t mnt_id, const char **ret_target, dev_t *ret_devno, int *ret_old_id);

/* Every mount ID of our namespace, in the kernel's order (ascending: the
 * order they were attached in).  Free *ret. */
int mount_list_all(uint64_t **ret, size_t *ret_n);
