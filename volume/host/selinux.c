/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "systemd/log.h"
#include "systemd/macro.h"
#include "systemd/testhook.h"
#include "volume/host/selinux.h"

/* linux/magic.h's SELINUX_MAGIC. */
#define SELINUXFS_MAGIC 0xf97cff8cU

static bool test_selinuxfs_enabled(const char *dir) {
        _cleanup_free_ char *enforce = NULL;
        int fd;

        if (asprintf(&enforce, "%s/enforce", dir) < 0)
                return false;
        fd = open(enforce, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return false;
        (void) close(fd);
        return true;
}

bool selinux_host_enabled(void) {
        const char *test_dir = test_hook_getenv(SELINUX_TEST_ENV);
        struct statfs sfs;
        struct statvfs svfs;
        bool enabled;

        if (!isempty(test_dir)) {
                enabled = test_selinuxfs_enabled(test_dir);
                log_warning("Test switch: selinuxfs taken from %s, SELinux %s", test_dir,
                            enabled ? "enabled" : "disabled");
                return enabled;
        }
        /* libselinux: selinuxfs there, and not mounted read-only (a read-only
         * one is what a container sees of a host policy it cannot use). */
        if (statfs(SELINUXFS_PATH, &sfs) < 0 || (uint32_t) sfs.f_type != SELINUXFS_MAGIC)
                return false;
        if (statvfs(SELINUXFS_PATH, &svfs) < 0 || (svfs.f_flag & ST_RDONLY))
                return false;
        return true;
}
