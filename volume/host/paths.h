/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* kubelet's on-disk layout and names (reference/kubelet-facts.md §1-§3), so
 * that drivers, the container runtime and a kubelet find volumes where they
 * expect them.  Paths are relative to root-dir (no leading '/'), because every
 * file operation goes through a root-dir descriptor (volume/host/rootdir.h).
 * Every function validates the names it puts into a path and returns -EINVAL
 * for one that could escape or is malformed; nothing is built from an
 * unchecked name. */

#include "systemd/macro.h"

#define CSI_PLUGIN_NAME "kubernetes.io/csi"
#define CSI_PLUGIN_NAME_ESCAPED "kubernetes.io~csi"
#define VOL_DATA_FILE "vol_data.json"
/* kvolumed's intent record of a volume dir (volume/state/intent.h), and of one
 * pod's publish of a raw block volume (its PV's data dir is shared). */
#define INTENT_FILE "kvolumed.json"
#define BLOCK_INTENT_PREFIX "kvolumed-"
/* kvolumed's own tree under root-dir, where its records are kept: never in
 * a volume dir, whose removal by kubelet's teardown (removeMountDir, the
 * orphaned pod cleanup) fails on any file it did not write, so that a node
 * can be handed back to kubelet at any time.  Records are durable through
 * the intent log before the calls, then by themselves with the volume dirs,
 * file by file, directory by directory (rootsync.c). */
#define RECORDS_DIR "kvolumed"
/* The records' redo log (volume/host/intentlog.h), in kvolumed's own tree. */
#define INTENT_LOG_FILE RECORDS_DIR "/intent-log"

/* "csi-" + 64 hex digits + NUL */
#define CSI_HASH_NAME_MAX 69

/* Ephemeral inline volume handle: "csi-" + hex(sha256(podUID + volumeName)). */
int csi_ephemeral_handle(const char *pod_uid, const char *volume_name, char ret[static CSI_HASH_NAME_MAX]);
/* VolumeAttachment name: "csi-" + hex(sha256(handle + driver + nodeName)). */
int csi_attachment_name(const char *handle, const char *driver, const char *node_name,
                        char ret[static CSI_HASH_NAME_MAX]);
/* Unique name in Node.status.volumesAttached/volumesInUse:
 * "kubernetes.io/csi/<driver>^<handle>". */
int csi_unique_volume_name(const char *driver, const char *handle, char **ret);

/* pods/<uid>/volumes/kubernetes.io~csi/<specName> — the per-pod volume dir,
 * holding vol_data.json and the publish target "mount". */
int path_pod_volume_dir(const char *pod_uid, const char *spec_name, char **ret);
/* pods/<uid>/volumes/kubernetes.io~csi/<specName>/mount — NodePublish target. */
int path_publish_target(const char *pod_uid, const char *spec_name, char **ret);
/* The inverse of path_publish_target(): -EINVAL for any other path. */
int path_parse_publish_target(const char *relpath, char **ret_uid, char **ret_spec_name);
/* plugins/kubernetes.io/csi/<driver>/<hex(sha256(handle))> — the staging
 * volume dir, holding vol_data.json and "globalmount". */
int path_staging_volume_dir(const char *driver, const char *handle, char **ret);
/* .../<sha>/globalmount — NodeStage target. */
int path_staging_target(const char *driver, const char *handle, char **ret);

/* Where the intent record of the volume dir "volume_dir" (relative, as
 * built above) is kept: RECORDS_DIR/<volume_dir>/kvolumed.json, mirroring
 * the volume dir's path; pod_uid: the record of that pod's publish of a raw
 * block volume (.../kvolumed-<podUID>.json), whose records share its PV's
 * data dir.  Every writer and reader of a record builds its path here. */
int path_intent_record(const char *volume_dir, const char *pod_uid, char **ret);
/* Where an older kvolumed kept it: in the volume dir itself.  Read (and
 * moved) at start-up only. */
int path_legacy_intent_record(const char *volume_dir, const char *pod_uid, char **ret);
/* Whether name is that of an intent record: INTENT_FILE or a raw block
 * publish's BLOCK_INTENT_PREFIX<podUID>.json. */
bool path_intent_record_name(const char *name);
/* The volume dir a record at relpath (under RECORDS_DIR) describes: the
 * inverse of path_intent_record(); -EINVAL for any other path. */
int path_parse_intent_record(const char *relpath, char **ret_volume_dir);

/* Raw block (§1.3). */
int path_block_map_dir(const char *spec_name, char **ret);     /* plugins/kubernetes.io/csi/volumeDevices/<spec>/dev */
int path_block_data_dir(const char *spec_name, char **ret);    /* .../volumeDevices/<spec>/data */
int path_block_staging(const char *spec_name, char **ret);     /* .../volumeDevices/staging/<spec> */
int path_block_publish(const char *spec_name, const char *pod_uid, char **ret); /* .../publish/<spec>/<uid> */
int path_pod_device_dir(const char *pod_uid, char **ret);      /* pods/<uid>/volumeDevices/kubernetes.io~csi */
