/* SPDX-License-Identifier: Apache-2.0 */
/* What CSI's volumes wait for before an operation starts (volume/kind.h's
 * planning entries): the CSIDriver's lifecycle modes, the driver's
 * registration, the attach limit and the VolumeAttachment. */
#include <stdio.h>

#include "volume/internal.h"
#include "volume/kinds/csi/kind.h"

static const char *lifecycle_problem(VolumeManager *m, const VolumeSpec *s, char buf[static 512]) {
        const K8sCSIDriver *d = csi_driver_object(m, s->driver);
        const char *mode = s->lifecycle == VOLUME_EPHEMERAL ? "Ephemeral" : "Persistent";
        size_t len;

        if (!d) {
                if (s->lifecycle == VOLUME_PERSISTENT)
                        return NULL;
                snprintf(buf, 512, "volume mode \"%s\" not supported by driver %s (no CSIDriver object)",
                         mode, s->driver);
                return buf;
        }
        if (k8s_strv_contains(d->volume_lifecycle_modes, mode))
                return NULL;
        len = (size_t) snprintf(buf, 512, "volume mode \"%s\" not supported by driver %s (only supports [",
                                mode, s->driver);
        for (size_t i = 0; d->volume_lifecycle_modes && d->volume_lifecycle_modes[i] && len < 480; i++)
                len += (size_t) snprintf(buf + len, 512 - len, "%s\"%s\"", i ? "," : "",
                                         d->volume_lifecycle_modes[i]);
        snprintf(buf + len, 512 - len, "])");
        return buf;
}

/* The volume's VolumeAttachment on this node from the lookup cache, the
 * volume its asker (va_name: its name, for logs). */
static int lookup_attachment(VolumeManager *m, const VolumeSpec *s, char va_name[static CSI_HASH_NAME_MAX],
                             const K8sVolumeAttachment **ret) {
        _cleanup_free_ char *asker = manager_asker_of_volume(s->unique_name);
        int r = csi_attachment_name(s->handle, s->driver, m->node_name, va_name);

        *ret = NULL;
        return r < 0 ? r :
                       object_watches_get(m->watches, &k8s_kind_volume_attachment, NULL, va_name, asker,
                                          (const void **) ret);
}

/* Whether an attachable volume may be staged: reported in use, listed
 * attached in the Node's status, and its VolumeAttachment says attached. */
static bool attach_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p,
                         const DesiredVolume *dv, ActualVolume *av) {
        const VolumeSpec *s = dv->spec;
        const K8sVolumeAttachment *va = NULL;
        char va_name[CSI_HASH_NAME_MAX], message[512];
        int r;

        r = lookup_attachment(m, s, va_name, &va);
        if (r < 0 && r != -EAGAIN && r != -EACCES) {
                /* -EACCES: a node may not read a VolumeAttachment that does not
                 * exist yet (the authorizer has no edge to it): still waiting. */
                LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = dv->name, .driver = s->driver,
                                .volume_handle = s->handle };
                log_fields_errno(LOG_ERR, r, &f, "Cannot look up VolumeAttachment %s: %m", va_name);
        }
        if (reconciler_in_use_reported(m, s->unique_name) &&
            manager_node_lists_attached(m, s->unique_name) && r >= 0 && va && va->attached) {
                actual_volume_set_attach_wait(av, 0);
                av->attach_warned = false;
                return true;
        }
        if (av->attach_wait_since == 0)
                actual_volume_set_attach_wait(av, reconciler_now(ps));
        if (va && va->attach_error_message)
                snprintf(message, sizeof message, "AttachVolume.Attach failed for volume \"%s\" : %s",
                         s->spec_name, va->attach_error_message);
        else if (reconciler_now(ps) - av->attach_wait_since >= ATTACH_WAIT_WARNING_USEC)
                snprintf(message, sizeof message,
                         "Volume \"%s\" is not attached to node %s after %" PRIu64
                         "s: waiting for VolumeAttachment "
                         "%s",
                         s->spec_name, m->node_name,
                         (reconciler_now(ps) - av->attach_wait_since) / USEC_PER_SEC, va_name);
        else {
                /* Wake up when the warning is due. */
                reconciler_wake(m, ps, av->unique_name, p->uid,
                                av->attach_wait_since + ATTACH_WAIT_WARNING_USEC);
                return false;
        }
        if (!av->attach_warned) {
                av->attach_warned = true;
                manager_report_once(m, e, p, dv->name, "FailedAttachVolume", message);
        }
        return false;
}

/* Whether the volume's driver is registered.  One that is not yet is
 * waited for silently for DRIVER_WAIT_GRACE_USEC (registration of the
 * drivers found at start-up, or of a driver whose pod restarts, takes that
 * long at most), then reported once.  kubelet reports it at once, on every
 * pod, after each of its restarts (kubernetes/kubernetes#72500). */
static bool driver_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p,
                         const DesiredVolume *dv, ActualVolume *av) {
        const VolumeSpec *s = dv->spec;
        char message[512];

        if (csi_client_has_driver(m->csi, s->driver)) {
                av->driver_wait_since = 0;
                return true;
        }
        if (av->driver_wait_since == 0) {
                LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = dv->name, .driver = s->driver,
                                .volume_handle = s->handle };
                av->driver_wait_since = reconciler_now(ps);
                if (s->migrated_from)
                        log_fields(LOG_INFO, &f,
                                   "Volume %s of pod %s (in-tree %s, served through CSI migration) waits for "
                                   "CSI driver %s to register: install and register that driver on this node",
                                   dv->name, p->key, s->migrated_from, s->driver);
                else
                        log_fields(LOG_INFO, &f, "Volume %s of pod %s waits for CSI driver %s to register",
                                   dv->name, p->key, s->driver);
        }
        if (reconciler_now(ps) - av->driver_wait_since < DRIVER_WAIT_GRACE_USEC) {
                /* Wake up when the report is due. */
                reconciler_wake(m, ps, av->unique_name, p->uid,
                                av->driver_wait_since + DRIVER_WAIT_GRACE_USEC);
                return false;
        }
        snprintf(message, sizeof message,
                 "MountVolume.SetUp failed for volume \"%s\" : kubernetes.io/csi: driver "
                 "name %s not found in the list of registered CSI drivers",
                 s->spec_name, s->driver);
        manager_report_once(m, e, p, dv->name, "FailedMount", message);
        return false;
}

static void log_driver_wait(ActualVolume *av) {
        LogFields f = { .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };
        if (av->driver_wait_logged)
                return;
        av->driver_wait_logged = true;
        log_fields(LOG_NOTICE, &f,
                   "Volume %s is no longer wanted; tearing it down waits for CSI driver %s to "
                   "register",
                   av->unique_name, av->driver);
}


bool csi_refuses(VolumeManager *m, const VolumeSpec *s, char *message, size_t size) {
        char buf[512];
        const char *problem = lifecycle_problem(m, s, buf);

        if (!problem)
                return false;
        snprintf(message, size, "MountVolume.SetUp failed for volume \"%s\" : kubernetes.io/csi: "
                 "mounter.SetupAt failed to check volume lifecycle mode: %s", s->spec_name, problem);
        return true;
}

bool csi_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
               ActualVolume *av) {
        return driver_ready(m, ps, e, p, dv, av);
}

/* Keep the VolumeAttachment's cached answer (the attach wait's) while a
 * stage or publish runs; the operation reads its publish context with a
 * GET of its own. */
void csi_busy(VolumeManager *m, const VolumeSpec *s) {
        char va_name[CSI_HASH_NAME_MAX];
        const K8sVolumeAttachment *va;

        if (s->lifecycle == VOLUME_PERSISTENT && csi_driver_attachable(m, s->driver))
                (void) lookup_attachment(m, s, va_name, &va);
}

bool csi_selinux_mount(VolumeManager *m, const VolumeSpec *s) {
        const K8sCSIDriver *d = csi_driver_object(m, s->driver);
        return d && d->se_linux_mount;
}

bool csi_stages(const VolumeSpec *s) {
        return s->lifecycle == VOLUME_PERSISTENT;
}

bool csi_stage_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p,
                     const DesiredVolume *dv, ActualVolume *av) {
        const VolumeSpec *s = dv->spec;
        char buf[512];

        /* KEP-4876: no call bound to fail while the driver's attach limit is reached. */
        if (csi_driver_attachable(m, s->driver) && drivers_attach_limit_reached(m, av, buf, sizeof buf)) {
                manager_report_once(m, e, p, dv->name, "VolumeAttachmentLimitExceeded", buf);
                return false;
        }
        return !csi_driver_attachable(m, s->driver) || attach_ready(m, ps, e, p, dv, av);
}

/* Teardown needs the driver; its registration wakes us up. */
bool csi_available(VolumeManager *m, const ActualVolume *av) {
        return csi_client_has_driver(m->csi, av->driver);
}

bool csi_waiting(VolumeManager *m, const ActualVolume *av, const VolumeSpec *s, char *buf, size_t size) {
        if (av->driver_wait_since != 0 && !csi_client_has_driver(m->csi, s->driver)) {
                snprintf(buf, size, "waiting for CSI driver %s to register", s->driver);
                return true;
        }
        if (av->attach_wait_since != 0) {
                snprintf(buf, size, "waiting for volume %s to be attached to node %s", s->spec_name,
                         m->node_name);
                return true;
        }
        return false;
}

void csi_teardown_waits(ActualVolume *av) {
        log_driver_wait(av);
}

bool csi_attachable(VolumeManager *m, const ActualVolume *av) {
        return csi_driver_attachable(m, av->driver);
}
