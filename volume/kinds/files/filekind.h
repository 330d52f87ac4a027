/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the kinds that write files themselves share: configMap, secret,
 * downwardAPI, projected (volume/kind.h's entries, parametrized by a
 * FileKindType).  kubelet's layout and behaviour:
 *
 *   pods/<uid>/volumes/kubernetes.io~<kind>/<name>/   the volume dir, which
 *       is also the publish target the containers bind: on a tmpfs of its
 *       own for secret, downwardAPI and projected (kubelet wraps them in a
 *       Memory emptyDir), a plain directory on root-dir's disk for configMap
 *       (a disk emptyDir); the files in it as kubelet's AtomicWriter lays
 *       them (volume/host/atomicwriter.h: ..data -> ..<timestamp>/, and a
 *       symlink per top-level name).
 *
 * The desired content is computed by the kind's desire entry (from the
 * ClusterView: a configMap, a secret, the pod's fields) into a FileSource,
 * the spec's kind data; its digest is kept in the publish once written, and
 * refresh_due asks for a publish again when the pod's desired content has
 * another digest (an object updated): the write is then the AtomicWriter's
 * swap, and no write at all when nothing differs (after a restart, when the
 * digest of what is on disk is not known, the publish runs once and finds
 * the same content: nothing rewritten).
 *
 * Publish (run, OP_PUBLISH): the frame made the volume dir and wrote the
 * intent record; the tmpfs is mounted on it (idempotent), the dir gets
 * kubelet's mode 0777 (| the tmpfs's sticky bit), the payload is written
 * with the pod's fsGroup applied before the swap, and every change is
 * noted in root-dir's notes, so that the pass's batched sync makes it
 * durable (root_dir_note_changed).
 * Unpublish (after the runtime's word, the frame's): atomic_clear (only
 * what the writer made), then, for a tmpfs, the mount-table guard (no other
 * mount of that tmpfs under root-dir: a container's bind still holds it)
 * and the unmount; the frame's rmdir takes the dir (never recursively: a
 * dir that is not empty or still a mount point stays, with a log line).
 * Reconstruction: a dir found is published (uncertain when its tmpfs is
 * gone — a reboot: set up again), its digest unknown (see above).
 * All of it is plain blocking file I/O on kvolumed's own tmpfs or
 * root-dir's own disk, which no other party serves. */

#include <stdbool.h>
#include <stdint.h>

#include "volume/host/atomicwriter.h"
#include "volume/kind.h"
#include "volume/kinds/files/keyprojection.h"

typedef struct FileKindType {
        const VolumeKind *kind;
        bool tmpfs;   /* on a tmpfs of its own (kubelet's Memory emptyDir wrapper) */
        bool secret;  /* its bytes are secret: wiped when freed, never logged */
} FileKindType;

/* VolumeSpec.source of a file kind: what the volume must hold. */
typedef struct FileSource {
        AtomicPayload payload;                   /* normalized (key_payload_normalize) */
        uint8_t digest[KEY_PAYLOAD_DIGEST_SIZE]; /* key_payload_digest of it */
        bool secret;
} FileSource;

/* Takes *payload (emptied); normalizes and digests it.  NULL: out of memory. */
FileSource *file_source_new(AtomicPayload *payload, bool secret);
void *file_source_copy(const void *source);
void file_source_free(void *source);

/* Fills dv->spec for the pod's volume "name" of kind t with src (taken,
 * freed on failure): unique name "<plugin>/<podUID>-<name>", ephemeral,
 * read-only.  0 or -ENOMEM. */
int file_kind_spec(const FileKindType *t, const K8sPod *pod, const char *name, FileSource *src, DesiredVolume *dv);

/* The rest of a configMap's or secret's desire entry, after its lookup in
 * the view ("kind_name": "configmap" or "secret"; lookup: what the view's
 * get answered; exists: the object was found; src: its keys): waiting while
 * it is looked up (-EAGAIN) or refused (-EACCES: the server's words), waiting
 * with kubelet's words while a non-optional object or key is missing (not
 * final: it may be created; a volume already set up keeps its content
 * meanwhile, as kubelet's does), an empty volume for an optional missing
 * object, failed for a path no writer may write; else dv->spec.  The
 * volume's source is validated first (k8s_pod_volume_validate). */
int file_kind_desire_keys(const FileKindType *t, const char *kind_name, const K8sPod *pod, const K8sPodVolume *v,
                          const K8sKeyProjection *proj, const ClusterView *view, bool block, int lookup,
                          bool exists, const KeySource *src, DesiredVolume *dv);

/* kind.h's paths: pods/<uid>/volumes/<pod_dir>/<spec_name>, both the dir
 * and the target; no staging (-EOPNOTSUPP). */
int file_kind_paths(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name, char **ret_dir,
                    char **ret_target);

/* kind.h's run for kind t. */
void file_kind_run(const FileKindType *t, Operation *op);
/* kind.h's outcome: the written digest into the publish; a disk dir is no
 * mount to watch. */
void file_kind_outcome(const FileKindType *t, Operation *op, bool success);
/* kind.h's refresh_due: the pod's desired content differs from what was
 * written (or what was written is not known: after a restart). */
bool file_kind_refresh_due(VolumeManager *m, const ActualVolume *av, ActualPublish *pub, uint64_t now,
                           uint64_t *next_wake);
/* kind.h's reconstruct_publish for kind t. */
void file_kind_reconstruct(const FileKindType *t, VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                           const char *spec_name);
