/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A kubelet still running on kvolumed's root-dir: two volume managers would
 * mount and unmount the same volumes.  kubelet takes no lock on root-dir
 * (its --lock-file is off by default) and may run under any unit name
 * (kubelet.service, k3s, rke2...), but every kubelet since 1.15 listens on
 * <root-dir>/pod-resources/kubelet.sock (the PodResources API), and the
 * device manager on /var/lib/kubelet/device-plugins/kubelet.sock (a fixed
 * path, = <root-dir>/device-plugins/... for the default root-dir).  A socket
 * there that accepts a connection is a live kubelet; one that refuses it
 * (ECONNREFUSED) is what a stopped kubelet leaves behind. */

/* root_fd: root-dir's directory (the lock's).  0 when no kubelet answers;
 * -EADDRINUSE when one does, logged with the socket, the process (pid,
 * name) and what to do.  -ENOMEM; nothing else: a socket that cannot be
 * probed is logged at debug and counts as none. */
int kubelet_check_root_dir(int root_fd, const char *root_dir);
