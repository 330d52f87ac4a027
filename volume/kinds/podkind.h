/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the kinds kubelet sets up itself (emptyDir, hostPath, local PVs)
 * share: kubelet's path of a pod's volume, their work run off the loop and
 * ended through the operation frame, the publish that is no mount, and
 * their reconstruction from the directory and its intent record. */

#include <stdbool.h>

#include "volume/kind.h"
#include "volume/host/offloop.h"

/* pods/<uid>/volumes/<kind's pod_dir>/<spec_name>, both the volume dir and
 * the target (kubelet has no "mount" below it for these kinds). */
int podkind_paths(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name,
                  char **ret_dir, char **ret_target);

/* Runs work(data) off the loop (volume/host/offloop.h), then ends op: a
 * success, or a failure with the work's message.  The job is op->job; while
 * one is in flight a second call (root-dir came back, run again) does
 * nothing.  fs_group: a publish then applies the pod's fsGroup (kubelet's
 * SetVolumeOwnership) unless the volume is read-only. */
void podkind_run_off_loop(Operation *op, offloop_work_t work, void *data, void (*data_free)(void *),
                          bool fs_group);

/* The start of a kind's publish or unpublish: the work's data (size bytes, a
 * PodkindWork first) allocated and its common part filled, fill(data, op)
 * adding the kind's own part (may be NULL), then podkind_run_off_loop(); a
 * failure on the way ends op ("out of memory", as it nearly always is) and
 * frees the data with data_free. */
void podkind_start(Operation *op, size_t size, int (*fill)(void *data, const Operation *op), offloop_work_t work,
                   void (*data_free)(void *), bool fs_group);

/* A kind's outcome entry for a publish that makes no mount (a disk emptyDir,
 * hostPath): nothing for the mount watch to wait for or watch, and the
 * intent record says so at once (a restart then takes it for set up). */
void podkind_publish_made_no_mount(Operation *op);

/* Reconstruction of pods/<uid>/volumes/<pod_dir>/<spec_name> (the volume's
 * unique name per pod, "<plugin>/<uid>-<name>", or per PV, "<plugin>/<pv>"):
 * set up when
 * mounted (a tmpfs, a bind), or when the record says this boot's publish
 * made no mount; otherwise uncertain: published again if a pod wants it,
 * torn down if none does. */
void podkind_reconstruct_publish(VolumeManager *m, const VolumeKind *kind, VolumeLifecycle lifecycle,
                                 bool per_pod, const char *pod_uid, const char *spec_name);

/* The parts of the work's data every kind has: root-dir (a descriptor of
 * its own), the target, the journal fields. */
typedef struct PodkindWork {
        int root_fd;
        char *root_path;
        char *target; /* relative to root-dir */
        char *pod_uid, *pod, *volume;
} PodkindWork;

int podkind_work_init(PodkindWork *w, const Operation *op);
void podkind_work_done(PodkindWork *w);
LogFields podkind_work_fields(const PodkindWork *w);
/* The target's parent opened beneath root-dir (never following a symlink)
 * and its last component. */
int podkind_open_parent(const PodkindWork *w, int *ret_fd, const char **ret_name);
