/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go), for the volumes
 * kvolumed fills itself: configMap, secret, downwardAPI, projected.  The
 * layout is kubelet's, so that a pod (or a kubelet taking the node back)
 * sees what it would see under kubelet:
 *
 *   <dir>/..2026_11_28_02_30_00.123456789/   the data of one version
 *   <dir>/..data -> ..2026_11_28_02_30_00.123456789
 *   <dir>/<top> -> ..data/<top>              one per top-level element of a key
 *
 * An update writes a new timestamped directory, makes a "..data_tmp" symlink
 * to it and renames that over "..data": readers see the old version or the
 * new one, never a mix.  Everything is done by descriptor below dir_fd:
 * no symlink found there is ever followed, nothing is written or removed
 * outside it, a mount found inside is never entered. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "systemd/log.h"
#include "systemd/macro.h"

#define ATOMIC_DATA_DIR "..data"
#define ATOMIC_DATA_TMP "..data_tmp"
#define ATOMIC_MAX_PATH 4096 /* kubelet's maxPathLength */
#define ATOMIC_MAX_NAME 255  /* kubelet's maxFileNameLength */
/* Not kubelet's: the depth of a key's path, so that writing, reading and
 * removing a version holds a bounded number of descriptors. */
#define ATOMIC_MAX_DEPTH 64
/* Reading a version back: a file larger than this is not kvolumed's (the API
 * server caps an object at about 1.5 MiB). */
#define ATOMIC_MAX_FILE_SIZE (64u * 1024u * 1024u)

#define ATOMIC_UID_NONE ((uid_t) -1)

typedef struct AtomicPayloadFile {
        char *path; /* relative; atomic_payload_validate_path's rules; cleaned by the writer */
        uint8_t *data;
        size_t size;
        mode_t mode; /* the final permission bits (defaultMode / items[].mode applied by the caller) */
        uid_t uid;   /* owner (kubelet's FsUser of a token file), or ATOMIC_UID_NONE: the writer's */
} AtomicPayloadFile;

typedef struct AtomicPayload {
        AtomicPayloadFile *files;
        size_t n;
} AtomicPayload;

/* Appends a copy of path and data.  uid: ATOMIC_UID_NONE unless a token's fsUser. */
int atomic_payload_add(AtomicPayload *p, const char *path, const void *data, size_t size, mode_t mode,
                       uid_t uid);
/* Frees what the payload holds (paths, data, the array) and empties it; the
 * data is wiped first (explicit_bzero): it may be a secret's. */
void atomic_payload_done(AtomicPayload *p);

/* kubelet's validatePath: not empty, relative, at most 4096 bytes, no ".."
 * element, no element over 255 bytes, and the first element must not start
 * with ".." (kubelet's reserved names: ..data, ..data_tmp, the versions).
 * Also refused: a path naming no file once "." and empty elements are dropped
 * (".", "a/."), deeper than ATOMIC_MAX_DEPTH.  0 or -EINVAL with *ret_reason
 * (static text, optional). */
int atomic_payload_validate_path(const char *path, const char **ret_reason);

/* What changed below dir_fd, for the caller's batched durability (the RootDir
 * notes of volume/rootdir.h): relpath is relative to dir_fd, "" is dir_fd
 * itself.  Called after every change, in order. */
typedef enum AtomicChange {
        ATOMIC_CHANGED_FILE = 1 << 0, /* a file written */
        ATOMIC_CHANGED_DIR = 1 << 1,  /* a directory whose entries changed */
} AtomicChange;
typedef void (*atomic_note_t)(const char *relpath, AtomicChange kind, void *userdata);

typedef struct AtomicWriteOptions {
        /* The pod's fsGroup, when has_fs_group.  Applied to the new version
         * before the swap, as kubelet's SetVolumeOwnership does for these
         * read-only kinds: group fsGroup on every file, directory and symlink
         * the writer makes, mode | 0440 on files, mode | 0550 | setgid on
         * directories (dir_fd's own directory too). */
        bool has_fs_group;
        gid_t fs_group;
        /* fsync each file and directory here, in an order that makes the new
         * version durable before the swap; for a caller that is off the
         * loop and not batching.  Without it, note_changed is the caller's. */
        bool sync;
        atomic_note_t note_changed; /* optional */
        void *userdata;
        const LogFields *log; /* journal fields of the debug lines (POD=, VOLUME=, ...) */
        const char *path;     /* dir_fd's path, for messages only */
} AtomicWriteOptions;

/* Writes payload into dir_fd (the volume's directory; O_PATH is enough).
 * Nothing is written when "..data" already holds exactly this payload (the
 * same paths, bytes, modes, owners): *ret_changed = false, though a missing
 * user-visible symlink is put back and leftovers of a crash (a "..data_tmp",
 * versions "..data" does not name) are removed.  Otherwise a new version,
 * the swap, the symlinks of new top-level names (made before the swap: they
 * resolve once the swap is done), then the removal of symlinks of names no
 * longer in the payload (only "<name> -> ..data/<name>" symlinks, never
 * another file, directory or mount) and of the old version.
 * A name of the payload that exists in dir_fd as anything other than a symlink
 * is refused (-EEXIST) before anything is written; a symlink there not
 * made by kvolumed is replaced (never followed).
 * The payload may hold a path twice: the last wins (kubelet's map).
 * Plain blocking file I/O: the caller runs it where it runs file work, and
 * serializes the writes of one directory (kubelet's writer has the same rule).
 * Durability: with "sync", the new version is durable before the swap; with
 * batched notes instead, a power loss can leave "..data" naming a version
 * whose bytes did not reach the disk: the next write compares, finds the
 * difference and rewrites it.
 * opts may be NULL: no fsGroup, no sync, no notes.
 * -errno on failure, with *ret_reason (optional, allocated) saying what an
 * operator can act on.  A failure before the swap leaves the old version
 * visible and no trace of the new one; a version or leftover that cannot be
 * removed (-EBUSY: a mount inside it) is reported after the new version is
 * in place (*ret_changed then says so), and retried by the next write. */
int atomic_write(int dir_fd, const AtomicPayload *payload, const AtomicWriteOptions *opts, bool *ret_changed,
                 char **ret_reason);

/* Teardown: removes what the writer made in dir_fd — the "<name> ->
 * ..data/<name>" symlinks first, then "..data", the temporary symlinks and
 * every version (never entering a mount: -EBUSY, left) — and nothing else,
 * so that the caller's rmdir of dir_fd fails (ENOTEMPTY) on anything that is
 * not the writer's. */
int atomic_clear(int dir_fd, const AtomicWriteOptions *opts, char **ret_reason);

/* What "..data" holds now (for reconstruction after a restart), files sorted
 * by path; an empty payload when there is no "..data".  -EUCLEAN when the
 * version holds anything but directories and regular files of at most
 * ATOMIC_MAX_FILE_SIZE, or "..data" is not a symlink to a version. */
int atomic_read_current(int dir_fd, AtomicPayload *ret);
