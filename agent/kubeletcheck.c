/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/apisocket.h"
#include "agent/kubeletcheck.h"
#include "systemd/log.h"
#include "systemd/macro.h"

static const char *const kubelet_sockets[] = {
        "pod-resources/kubelet.sock",
        "device-plugins/kubelet.sock",
};

/* 1 and the listener's description when something accepts connections on
 * <root-dir>/<name>, else 0.  The socket is reached through its directory's
 * descriptor (/proc/self/fd/N/kubelet.sock): no symlink in root-dir is
 * followed, and a long root-dir fits sun_path. */
static int probe(int root_fd, const char *root_dir, const char *name, char *holder, size_t size) {
        _cleanup_close_ int dir_fd = -1, fd = -1;
        _cleanup_free_ char *dir = strndup(name, strrchr(name, '/') - name);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        if (!dir)
                return -ENOMEM;
        dir_fd = openat(root_fd, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0) {
                if (errno != ENOENT)
                        log_debug_errno(errno, "Not probing %s/%s for a kubelet: %m", root_dir, name);
                return 0;
        }
        snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/%s", dir_fd, strrchr(name, '/') + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_debug_errno(errno, "Not probing %s/%s for a kubelet: %m", root_dir, name), 0;
        /* EAGAIN: the backlog is full, which only a live listener has. */
        if (connect(fd, (const struct sockaddr *) &sa, sizeof sa) >= 0 || errno == EAGAIN) {
                socket_describe_peer(fd, holder, size);
                return 1;
        }
        if (errno != ENOENT && errno != ECONNREFUSED)
                log_debug_errno(errno, "Cannot tell whether a kubelet listens on %s/%s: %m", root_dir, name);
        return 0;
}

int kubelet_check_root_dir(int root_fd, const char *root_dir) {
        char holder[128];

        for (size_t i = 0; i < ELEMENTSOF(kubelet_sockets); i++) {
                int r = probe(root_fd, root_dir, kubelet_sockets[i], holder, sizeof holder);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                return log_error_errno(EADDRINUSE,
                                       "A kubelet is running on root-dir %s: %s answers on %s/%s. kvolumed "
                                       "and kubelet's volume manager must never both mount and unmount "
                                       "there; kvolumed does not start. Stop kubelet first (systemctl "
                                       "stop kubelet; on a node where kubelet runs the pods, read "
                                       "\"Handing a node over\" in /usr/share/doc/kvolumed/README.md.gz "
                                       "before you do), then start kvolumed",
                                       root_dir, holder, root_dir, kubelet_sockets[i]);
        }
        return 0;
}
