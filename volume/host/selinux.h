/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Whether this host has SELinux enabled, as libselinux's is_selinux_enabled()
 * decides it (selinuxfs mounted read-write at /sys/fs/selinux), without a
 * dependency on libselinux.  kubelet passes no context= mount option on a
 * host without SELinux, and neither do we. */

#include <stdbool.h>

#define SELINUXFS_PATH "/sys/fs/selinux"

/* TEST ONLY: KVOLUMED_TEST_SELINUXFS=DIR stands for the selinuxfs mount point
 * (a plain directory cannot carry selinuxfs's magic): SELinux counts as
 * enabled when DIR holds a readable "enforce" file, as selinuxfs does. */
#define SELINUX_TEST_ENV "SELINUXFS" /* KVOLUMED_TEST_SELINUXFS, systemd/testhook.h */

bool selinux_host_enabled(void);
