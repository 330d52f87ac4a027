/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* vol_data.json, the metadata kubelet keeps next to each CSI volume
 * (kubelet-facts §1.2).  We write it byte-for-byte as kubelet's Go code does
 * (json.Encoder: keys sorted, compact, HTML characters escaped, trailing
 * newline) so that a kubelet taking over the node reads ours, and we read
 * the files a kubelet left. */

#include "systemd/macro.h"

typedef struct VolData {
        char *spec_vol_id;           /* specVolID */
        char *volume_handle;         /* volumeHandle */
        char *driver_name;           /* driverName */
        char *node_name;             /* nodeName */
        char *attachment_id;         /* attachmentID */
        char *volume_lifecycle_mode; /* volumeLifecycleMode: Persistent | Ephemeral */
        char *selinux_mount_context; /* seLinuxMountContext */
} VolData;

/* Absent (NULL) fields are omitted. */
int vol_data_format(const VolData *d, char **ret);
/* All values must be strings; unknown keys are ignored (newer kubelets may
 * add some).  -EBADMSG for anything that is not such an object. */
int vol_data_parse(const char *text, VolData *ret);
void vol_data_done(VolData *d);
