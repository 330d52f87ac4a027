/* SPDX-License-Identifier: Apache-2.0 */
/* cinder → cinder.csi.openstack.org (csi-translation-lib openstack_cinder.go).
 * The source's secretRef is not carried over: the lib drops it. */
#include <errno.h>

#include "k8s/csimigration/internal.h"

#define DRIVER "cinder.csi.openstack.org"
#define TOPOLOGY_KEY "topology." DRIVER "/zone"

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        int r;

        r = migration_csi_new(pv, DRIVER, s->volume_id, s->read_only, s->fs_type);
        if (r < 0)
                return r;
        return migration_topology_from_in_tree(pv, TOPOLOGY_KEY);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        int r;

        r = migration_name_set(pv, "%s-%s", DRIVER, strempty(s->volume_id));
        if (r < 0)
                return r;
        r = migration_csi_new(pv, DRIVER, s->volume_id, s->read_only, s->fs_type);
        if (r < 0)
                return r;
        return migration_access_modes_set(pv, "ReadWriteOnce");
}

const MigrationPlugin migration_plugin_cinder = {
        .kind = K8S_IN_TREE_CINDER,
        .plugin = "kubernetes.io/cinder",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
