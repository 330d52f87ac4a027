/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/host/tmpfs.h"

static uint64_t add_sat(uint64_t a, uint64_t b) {
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t emptydir_pod_memory_limit(const uint64_t *container_limits, size_t n_containers,
                                   const uint64_t *init_limits, size_t n_init, uint64_t overhead) {
        uint64_t sum = 0, init_max = 0;

        /* kubelet gives the pod cgroup a memory limit only when every
         * container declares one (memoryLimitsDeclared). */
        for (size_t i = 0; i < n_containers; i++) {
                if (container_limits[i] == 0)
                        return 0;
                sum = add_sat(sum, container_limits[i]);
        }
        for (size_t i = 0; i < n_init; i++) {
                if (init_limits[i] == 0)
                        return 0;
                init_max = MAX(init_max, init_limits[i]);
        }
        sum = MAX(sum, init_max);
        return sum == 0 ? 0 : add_sat(sum, overhead);
}

uint64_t emptydir_memory_size(uint64_t node_allocatable, uint64_t pod_memory_limit, uint64_t size_limit) {
        uint64_t size = node_allocatable;

        if (pod_memory_limit > 0 && pod_memory_limit <= size)
                size = pod_memory_limit;
        if (size_limit > 0 && size_limit <= size)
                size = size_limit;
        return size;
}

static int is_tmpfs_root(int fd) {
        struct statx sx;
        struct statfs sfs;

        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_TYPE, &sx) < 0)
                return -errno;
        if (!(sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) ||
            !(sx.stx_attributes & STATX_ATTR_MOUNT_ROOT))
                return 0;
        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        return sfs.f_type == TMPFS_MAGIC;
}

#if KVOLUMED_TEST_HOOKS
/* TEST ONLY (KVOLUMED_TEST_TMPFS_REFUSE_FILE=PATH): while PATH exists, the
 * tmpfs mount fails with ENOMEM as a kernel out of memory refuses it, so
 * that a test sees how a tmpfs that cannot be mounted is reported and
 * retried.  Nothing on an ordinary host makes that mount fail at will: an
 * immutable target or a read-only parent mount does not stop it. */
static bool tmpfs_test_refused(void) {
        const char *p = getenv("KVOLUMED_TEST_TMPFS_REFUSE_FILE");
        return !isempty(p) && access(p, F_OK) == 0;
}
#endif

int tmpfs_mount(int dir_fd, const char *name, const char *target_path, uint64_t size_bytes, mode_t mode,
                const char *selinux_context, const LogFields *log) {
        _cleanup_free_ char *options = NULL;
        _cleanup_close_ int fd = -1;
        char proc[64];
        size_t size = 0;
        FILE *f;
        int r;

        if (dir_fd < 0 || isempty(name) || strchr(name, '/') || streq(name, ".") || streq(name, ".."))
                return -EINVAL;
        if (selinux_context && strpbrk(selinux_context, "\",\n"))
                return log_fields_errno(LOG_ERR, -EINVAL, log, "Refusing SELinux context '%s' for %s",
                                        selinux_context, strempty(target_path));
        /* The top of what is mounted there now. */
        fd = openat(dir_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return log_fields_errno(LOG_ERR, errno, log, "Cannot open %s: %m", strempty(target_path));
        r = is_tmpfs_root(fd);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, log, "Cannot stat %s: %m", strempty(target_path));
        if (r > 0) {
                log_fields(LOG_DEBUG, log, "%s is already a tmpfs", strempty(target_path));
                return 0;
        }

        f = open_memstream(&options, &size);
        if (!f)
                return -ENOMEM;
        if (size_bytes > 0)
                fprintf(f, "size=%" PRIu64, size_bytes);
        if (mode != 0)
                fprintf(f, "%smode=%04o", ftell(f) > 0 ? "," : "", (unsigned) (mode & 07777));
        if (selinux_context)
                fprintf(f, "%scontext=\"%s\"", ftell(f) > 0 ? "," : "", selinux_context);
        if (fclose(f) != 0)
                return -ENOMEM;

        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
#if KVOLUMED_TEST_HOOKS
        if (tmpfs_test_refused()) {
                errno = ENOMEM;
                return log_fields_errno(LOG_ERR, errno, log, "Cannot mount a tmpfs (%s) on %s: %m",
                                        isempty(options) ? "default size" : options, strempty(target_path));
        }
#endif
        if (mount("tmpfs", proc, "tmpfs", 0, isempty(options) ? NULL : options) < 0)
                return log_fields_errno(LOG_ERR, errno, log, "Cannot mount a tmpfs (%s) on %s: %m",
                                        isempty(options) ? "default size" : options, strempty(target_path));
        log_fields(LOG_INFO, log, "Mounted a tmpfs (%s) on %s", isempty(options) ? "default size" : options,
                   strempty(target_path));
        return 1;
}
