/* SPDX-License-Identifier: Apache-2.0 */
/* portworxVolume → pxd.portworx.com (csi-translation-lib portworx.go).
 * Behind CSIMigrationPortworx, off by default (k8s/csimigration.h): "on"
 * is false, so nothing is migrated to it; the translation is here for
 * when it is on.  The lib carries readOnly over to neither the PV's nor
 * the inline volume's CSI source (an inline one's access mode says it). */
#include <errno.h>

#include "k8s/csimigration/internal.h"

#define DRIVER "pxd.portworx.com"

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        return migration_csi_new(pv, DRIVER, s->volume_id, false, s->fs_type);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        int r;

        r = migration_name_set(pv, "%s-%s", DRIVER, strempty(s->volume_id));
        if (r < 0)
                return r;
        r = migration_csi_new(pv, DRIVER, s->volume_id, false, s->fs_type);
        if (r < 0)
                return r;
        return migration_access_modes_set(pv, s->read_only ? "ReadOnlyMany" : "ReadWriteOnce");
}

const MigrationPlugin migration_plugin_portworx = {
        .kind = K8S_IN_TREE_PORTWORX,
        .plugin = "kubernetes.io/portworx-volume",
        .driver = DRIVER,
        .on = false,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
