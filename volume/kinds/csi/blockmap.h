/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Raw block volumes after NodePublishVolume: exposing the device the driver
 * published (a device node at the publish path) to a pod the way kubelet's
 * util.MapBlockVolume does (kubelet-facts §1.3), and taking it away again:
 *   1. a bind mount of the device onto the file <global map path>/<podUID>
 *      (plugins/kubernetes.io/csi/volumeDevices/<spec>/dev/<podUID>);
 *   2. the pod's device path, a symlink pods/<uid>/volumeDevices/
 *      kubernetes.io~csi/<spec> to the publish path;
 *   3. the "device lock": a loop device attached to that bind-mounted file,
 *      which holds the block device open so it cannot be silently replaced
 *      while a pod maps it.
 * All paths are relative to root-dir; every file is opened beneath it with
 * no symlink followed (volume/host/rootdir.h), and mounts are made through the
 * opened descriptors. */

#include <sys/types.h>

#include "systemd/log.h"
#include "volume/host/rootdir.h"

/* What identifies a block device across reboots: its number now, and the
 * udev properties that stay (a /dev name may be reordered by a reboot). */
typedef struct BlockIdentity {
        dev_t devno;
        char *serial; /* ID_SERIAL, or ID_WWN; NULL when udev knows none */
        char *link;   /* the first /dev/disk/by-id/ link; NULL when none */
} BlockIdentity;

/* The identity of the block device at relpath: -ENOTBLK when it is not a
 * block device (what a driver published must be one). */
int block_identify(RootDir *root, const char *relpath, BlockIdentity *ret);
void block_identity_done(BlockIdentity *id);
/* "major:minor" */
int block_devno_format(dev_t devno, char **ret);
int block_devno_parse(const char *s, dev_t *ret);

/* Steps 1–3 above; idempotent (what is there already is kept). */
int block_map(RootDir *root, const char *publish_path, const char *spec_name, const char *pod_uid,
              const LogFields *f);
/* The reverse, in kubelet's order: the loop device detached, the pod's
 * symlink removed, the bind mount unmounted and its file removed.  What is
 * already gone is fine. */
int block_unmap(RootDir *root, const char *spec_name, const char *pod_uid, const LogFields *f);

/* Removes what kvolumed made for a block volume, never a mount point nor a
 * file the driver made: for a pod's publish (pod_uid set; spec_name: that
 * publish's PV) its record and the publish target's parent if empty, and
 * the PV's dirs too when they serve nothing else (two PVs may name one
 * volume, staged under the name of the first); for the staged volume
 * (pod_uid NULL; spec_name: the PV it was staged for) the staging dir, the
 * data dir and its files, the global map dir, the volume's dir and its
 * publish dir. */
int block_dirs_remove(RootDir *root, const LogFields *f, const char *spec_name, const char *pod_uid);

/* Whether the pod's bind mount and device lock are in place. */
bool block_mapped(RootDir *root, const char *spec_name, const char *pod_uid);
/* Other pods' bind files in the volume's global map path (kubelet's
 * GetDeviceBindMountRefs): how many, not counting except_pod_uid. */
int block_map_refs(RootDir *root, const char *spec_name, const char *except_pod_uid);
