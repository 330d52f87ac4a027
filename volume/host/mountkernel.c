/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/fanotify.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "systemd/linux-mount-api.h"
#include "systemd/macro.h"
#include "volume/host/mountkernel.h"

/* The fixed part of the answer and room for a long mount point; grown on
 * EOVERFLOW. */
#define STATMOUNT_INITIAL_SIZE (sizeof(struct statmount) + 4096)
#define LISTMOUNT_BATCH 4096

static long sys_statmount(uint64_t mnt_id, uint64_t mask, struct statmount *buf, size_t size) {
        struct mnt_id_req req = { .size = MNT_ID_REQ_SIZE_VER0, .mnt_id = mnt_id, .param = mask };
        return syscall(__NR_statmount, &req, buf, size, 0);
}

static long sys_listmount(uint64_t after, uint64_t *ids, size_t n) {
        /* param: the last ID of the previous batch; 0 for the first. */
        struct mnt_id_req req = { .size = MNT_ID_REQ_SIZE_VER0, .mnt_id = LSMT_ROOT, .param = after };
        return syscall(__NR_listmount, &req, ids, n, 0);
}

int mount_events_open(int *ret_fd, const char **ret_why) {
        _cleanup_close_ int fd = -EBADF, ns = -EBADF;
        uint64_t id;

        *ret_why = NULL;
        /* listmount of one ID tells whether both calls exist (6.8). */
        if (sys_listmount(0, &id, 1) < 0) {
                /* EPERM: a seccomp filter that cannot name them, as the
                 * unit's SystemCallFilter= under Debian 12's systemd. */
                *ret_why = errno == ENOSYS ? "listmount(2) and statmount(2) need Linux 6.8"
                         : errno == EPERM  ? "listmount(2) refused (a system call filter: SystemCallFilter=?)"
                                           : "listmount(2) failed";
                return -errno;
        }
        /* FAN_REPORT_MNT is refused (EINVAL) before 6.15.  The queue is
         * unlimited: a lost event would cost a listing of every mount. */
        fd = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_MNT | FAN_UNLIMITED_QUEUE | FAN_CLOEXEC | FAN_NONBLOCK,
                           O_RDONLY);
        if (fd < 0) {
                *ret_why = errno == EINVAL ? "fanotify mount events need Linux 6.15" : "fanotify_init() failed";
                return -errno;
        }
        ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        if (ns < 0) {
                *ret_why = "/proc/self/ns/mnt cannot be opened";
                return -errno;
        }
        if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_MNTNS, FAN_MNT_ATTACH | FAN_MNT_DETACH, ns, NULL) < 0) {
                *ret_why = "the mount namespace cannot be marked for fanotify";
                return -errno;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int mount_events_read(int fd, mount_event_t handler, void *userdata) {
        /* Aligned for the metadata; an event with its mount record is 40 bytes. */
        union {
                struct fanotify_event_metadata md;
                char bytes[16 * 1024];
        } buf;
        int n = 0, r;

        for (;;) {
                ssize_t len = read(fd, &buf, sizeof buf);
                if (len < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return n;
                        return -errno;
                }
                if (len == 0)
                        return n;
                for (struct fanotify_event_metadata *md = &buf.md; FAN_EVENT_OK(md, len);
                     md = FAN_EVENT_NEXT(md, len)) {
                        const struct fanotify_event_info_mnt *info = NULL;
                        if (md->vers != FANOTIFY_METADATA_VERSION)
                                return -EPROTO;
                        n++;
                        if (md->mask & FAN_Q_OVERFLOW) {
                                r = handler(MOUNT_EVENT_OVERFLOW, 0, userdata);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        /* The records after the metadata: the mount's is the one. */
                        for (size_t off = md->metadata_len; off + sizeof(struct fanotify_event_info_header) <= md->event_len;) {
                                const struct fanotify_event_info_header *h = (const void *) ((const char *) md + off);
                                if (h->len == 0)
                                        break;
                                if (h->info_type == FAN_EVENT_INFO_TYPE_MNT && off + sizeof *info <= md->event_len)
                                        info = (const void *) h;
                                off += h->len;
                        }
                        if (!info)
                                continue;
                        r = handler(md->mask & FAN_MNT_ATTACH ? MOUNT_EVENT_ATTACH : MOUNT_EVENT_DETACH,
                                    info->mnt_id, userdata);
                        if (r < 0)
                                return r;
                }
        }
}

void statmount_buffer_done(StatmountBuffer *b) {
        free(b->data);
        b->data = NULL;
        b->size = 0;
}

int mount_stat(StatmountBuffer *b, uint64_t mnt_id, const char **ret_target, dev_t *ret_devno, int *ret_old_id) {
        struct statmount *sm;

        for (;;) {
                if (!b->data) {
                        b->data = malloc(STATMOUNT_INITIAL_SIZE);
                        if (!b->data)
                                return -ENOMEM;
                        b->size = STATMOUNT_INITIAL_SIZE;
                }
                if (sys_statmount(mnt_id, STATMOUNT_SB_BASIC | STATMOUNT_MNT_BASIC | STATMOUNT_MNT_POINT,
                                  b->data, b->size) >= 0)
                        break;
                if (errno != EOVERFLOW)
                        return -errno;
                /* A mount point longer than the room left: twice the room. */
                void *nb = realloc(b->data, 2 * b->size);
                if (!nb)
                        return -ENOMEM;
                b->data = nb;
                b->size *= 2;
        }
        sm = b->data;
        /* A mount outside our root (a chroot) has no mount point to give. */
        if (!(sm->mask & STATMOUNT_MNT_POINT) || !(sm->mask & STATMOUNT_SB_BASIC) ||
            !(sm->mask & STATMOUNT_MNT_BASIC) || sm->mnt_point >= sm->size - sizeof *sm)
                return -ENOENT;
        *ret_target = sm->str + sm->mnt_point;
        *ret_devno = makedev(sm->sb_dev_major, sm->sb_dev_minor);
        *ret_old_id = (int) sm->mnt_id_old;
        return 0;
}

int mount_list_all(uint64_t **ret, size_t *ret_n) {
        _cleanup_free_ uint64_t *ids = NULL;
        size_t n = 0, allocated = 0;

        for (;;) {
                long k;
                if (allocated - n < LISTMOUNT_BATCH) {
                        uint64_t *ni = reallocarray(ids, allocated + LISTMOUNT_BATCH, sizeof *ids);
                        if (!ni)
                                return -ENOMEM;
                        ids = ni;
                        allocated += LISTMOUNT_BATCH;
                }
                k = sys_listmount(n > 0 ? ids[n - 1] : 0, ids + n, LISTMOUNT_BATCH);
                if (k < 0)
                        return -errno;
                n += (size_t) k;
                if (k < LISTMOUNT_BATCH)
                        break;
        }
        *ret = TAKE_PTR(ids);
        *ret_n = n;
        return 0;
}
