/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Whole reads and writes: each call retries after EINTR and after a short
 * transfer until every byte is moved.  0, or -errno. */

#include <stddef.h>
#include <sys/types.h>

/* write() of all size bytes, from the file offset. */
int loop_write(int fd, const void *buf, size_t size);
/* pwrite() of all size bytes at offset at. */
int loop_pwrite(int fd, const void *buf, size_t size, off_t at);
/* pread() of all size bytes at offset at; -EIO when the file ends first. */
int loop_pread(int fd, void *buf, size_t size, off_t at);
