/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

/* Configuration only root may write, as sshd's StrictModes: what kvolumed
 * reads as configuration (kvolumed.conf, its drop-ins and their directory,
 * the kubeconfig) decides where tokens and secrets go and which API server
 * is believed, so a file another user could change is refused, not read.
 *
 * The rule (README, "Safety rules"):
 *   - the file is a regular file (a FIFO would block the reader, a device
 *     has side effects on open); a directory read as one is a directory;
 *   - it is owned by root (or by the user kvolumed runs as, who could change
 *     it anyway) and not writable by its group or by others, whatever the
 *     group;
 *   - so is every directory above it up to /, for the path as named and for
 *     the file it resolves to (symlinks are followed, as configuration
 *     management installs them, and each is checked: a symlink on the way
 *     must be owned by root too);
 *   - except that a directory above it may be world-writable if it has the
 *     sticky bit and is root's, as /tmp: others may add names there but
 *     cannot rename or remove root's, so a root-owned file or directory in it
 *     stays put.  A directory whose every entry is read (the drop-in
 *     directory) gets no such exception: anyone could add a drop-in there.
 * The file itself is checked with fstat() on the descriptor that is then
 * read, so it cannot be swapped between the check and the read. */

/* Opens "path" (O_DIRECTORY with "directory") for reading after the checks
 * above.  Returns the descriptor; on a refusal -EPERM with *ret_error
 * "PATH: what is wrong (mode 0NNN, owner uid N): ..." naming the offending
 * path; other failures of open(2) as -errno, *ret_error untouched. */
int secure_open(const char *path, bool directory, char **ret_error);
