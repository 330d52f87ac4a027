/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "systemd/fileio.h"

/* at < 0: write() from the file offset; else pwrite() at it. */
static int write_whole(int fd, const void *buf, size_t size, off_t at) {
        for (size_t done = 0; done < size;) {
                const uint8_t *p = (const uint8_t *) buf + done;
                ssize_t n =
                        at < 0 ? write(fd, p, size - done) : pwrite(fd, p, size - done, at + (off_t) done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t) n;
        }
        return 0;
}

int loop_write(int fd, const void *buf, size_t size) {
        return write_whole(fd, buf, size, -1);
}

int loop_pwrite(int fd, const void *buf, size_t size, off_t at) {
        return at < 0 ? -EINVAL : write_whole(fd, buf, size, at);
}

int loop_pread(int fd, void *buf, size_t size, off_t at) {
        for (size_t done = 0; done < size;) {
                ssize_t n = pread(fd, (uint8_t *) buf + done, size - done, at + (off_t) done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return -EIO;
                done += (size_t) n;
        }
        return 0;
}
