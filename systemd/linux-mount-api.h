/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What Debian 12's kernel headers (6.1) lack of the mount API kvolumed uses
 * on newer kernels, with the kernel's own values and layouts:
 *  - statmount(2) and listmount(2), Linux 6.8: include/uapi/linux/mount.h
 *    (struct mnt_id_req, struct statmount, STATMOUNT_*, LSMT_ROOT) and the
 *    syscall numbers of include/uapi/asm-generic/unistd.h (457, 458: one
 *    number on every architecture since the tables were unified);
 *  - fanotify mount events of a mount namespace, Linux 6.15:
 *    include/uapi/linux/fanotify.h (FAN_MNT_ATTACH, FAN_MNT_DETACH,
 *    FAN_REPORT_MNT, FAN_MARK_MNTNS, FAN_EVENT_INFO_TYPE_MNT and
 *    struct fanotify_event_info_mnt).
 * Only what is used is here; each definition stands back when a newer libc
 * or kernel header already gave it. */

#include <linux/fanotify.h>
#include <linux/types.h>
#include <sys/syscall.h>

#ifndef __NR_statmount
#  define __NR_statmount 457
#endif
#ifndef __NR_listmount
#  define __NR_listmount 458
#endif

#ifndef STATMOUNT_SB_BASIC
/* The request of statmount() and listmount(); 32 bytes is the version with
 * mnt_ns_id (6.11), 24 the first one: the kernel takes either. */
struct mnt_id_req {
        __u32 size;
        __u32 spare;
        __u64 mnt_id;
        __u64 param;
        __u64 mnt_ns_id;
};
#  define MNT_ID_REQ_SIZE_VER0 24

/* The fixed part of statmount()'s answer; the [str] fields are offsets into
 * str[].  The layout is the kernel's up to mnt_point, all that is read here;
 * the rest of its 512 bytes is spare or fields this code does not ask for. */
struct statmount {
        __u32 size;
        __u32 mnt_opts;
        __u64 mask;
        __u32 sb_dev_major;
        __u32 sb_dev_minor;
        __u64 sb_magic;
        __u32 sb_flags;
        __u32 fs_type;
        __u64 mnt_id;
        __u64 mnt_parent_id;
        __u32 mnt_id_old;
        __u32 mnt_parent_id_old;
        __u64 mnt_attr;
        __u64 mnt_propagation;
        __u64 mnt_peer_group;
        __u64 mnt_master;
        __u64 propagate_from;
        __u32 mnt_root;
        __u32 mnt_point;
        __u64 mnt_ns_id;
        __u64 __spare2[49]; /* fs_subtype, sb_source, ... in newer kernels */
        char str[];
};
_Static_assert(sizeof(struct statmount) == 512, "struct statmount: the kernel's fixed part is 512 bytes");
_Static_assert(sizeof(struct mnt_id_req) == 32, "struct mnt_id_req: the kernel's MNT_ID_REQ_SIZE_VER1");

#  define STATMOUNT_SB_BASIC 0x00000001U  /* sb_dev_major/minor, sb_magic, sb_flags */
#  define STATMOUNT_MNT_BASIC 0x00000002U /* mnt_id, mnt_parent_id, *_old, mnt_attr, ... */
#  define STATMOUNT_MNT_ROOT 0x00000008U
#  define STATMOUNT_MNT_POINT 0x00000010U
#  define STATMOUNT_FS_TYPE 0x00000020U

#  define LSMT_ROOT 0xffffffffffffffffULL /* listmount(): every mount of the namespace */
#endif

#ifndef FAN_MNT_ATTACH
#  define FAN_MNT_ATTACH 0x01000000
#  define FAN_MNT_DETACH 0x02000000
#  define FAN_REPORT_MNT 0x00004000
#  define FAN_MARK_MNTNS 0x00000110
#  define FAN_EVENT_INFO_TYPE_MNT 7
struct fanotify_event_info_mnt {
        struct fanotify_event_info_header hdr;
        __u64 mnt_id;
};
#endif
