/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <limits.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "csi/internal.h"
#include "systemd/log.h"

void csi_inotify_drain(int fd, csi_inotify_event_t fn, void *userdata) {
        union {
                struct inotify_event ev;
                char raw[16 * (sizeof(struct inotify_event) + NAME_MAX + 1)];
        } buf;

        for (;;) {
                ssize_t n = read(fd, &buf, sizeof buf);
                if (n < 0) {
                        if (errno != EAGAIN && errno != EINTR)
                                log_warning_errno(errno, "Failed to read inotify events: %m");
                        return;
                }
                for (char *q = buf.raw; q < buf.raw + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *) (void *) q;
                        q += sizeof *ev + ev->len;
                        fn(ev, userdata);
                }
        }
}
