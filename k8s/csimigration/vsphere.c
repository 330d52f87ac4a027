/* SPDX-License-Identifier: Apache-2.0 */
/* vsphereVolume → csi.vsphere.vmware.com (csi-translation-lib vsphere_volume.go).
 * readOnly is not carried over (the lib does not); storagePolicyName
 * becomes the "storagepolicyname" attribute. */
#include <errno.h>

#include "k8s/csimigration/internal.h"

#define DRIVER "csi.vsphere.vmware.com"
#define TOPOLOGY_ZONE_KEY "topology.csi.vmware.com/zone"
#define TOPOLOGY_REGION_KEY "topology.csi.vmware.com/region"

static int csi_set(const K8sInTreeSource *s, K8sPersistentVolume *pv) {
        int r;

        r = migration_csi_new(pv, DRIVER, s->volume_id, false, s->fs_type);
        if (r < 0)
                return r;
        if (!isempty(s->storage_policy_name))
                return migration_map_set(&pv->csi->volume_attributes, "storagepolicyname", s->storage_policy_name);
        return 0;
}

/* One key of translateTopologyFromInTreevSphereToCSI: the affinity's
 * in-tree key renamed, else the PV's label (one value, as it is) added. */
static int topology_key(K8sPersistentVolume *pv, const char *in_tree_key, const char *csi_key) {
        _cleanup_(k8s_strv_freep) char **values = NULL;
        const char *label;
        int r;

        r = migration_topology_values(pv, in_tree_key, &values);
        if (r < 0)
                return r;
        if (values)
                return migration_topology_replace(pv, in_tree_key, csi_key);
        label = k8s_string_map_get(&pv->labels, in_tree_key);
        if (isempty(label))
                return 0;
        char *one[] = { (char *) label, NULL };
        r = migration_topology_add(pv, csi_key, one);
        return r == -EINVAL ? 0 : r; /* only blanks: nothing to add */
}

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        const char *zone_label, *region_label;
        int r;

        r = csi_set(s, pv);
        if (r < 0)
                return r;
        migration_topology_label(pv, &zone_label, &region_label);
        r = topology_key(pv, zone_label, TOPOLOGY_ZONE_KEY);
        if (r < 0)
                return r;
        return topology_key(pv, region_label, TOPOLOGY_REGION_KEY);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        int r;

        r = migration_name_set(pv, "%s-%s", DRIVER, strempty(s->volume_id));
        if (r < 0)
                return r;
        /* The lib reads the policy name from the new PV's (nil) vsphereVolume
         * here, which would panic; the volume's own is what it means. */
        r = csi_set(s, pv);
        if (r < 0)
                return r;
        return migration_access_modes_set(pv, "ReadWriteOnce");
}

const MigrationPlugin migration_plugin_vsphere = {
        .kind = K8S_IN_TREE_VSPHERE,
        .plugin = "kubernetes.io/vsphere-volume",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
