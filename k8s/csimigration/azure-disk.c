/* SPDX-License-Identifier: Apache-2.0 */
/* azureDisk → disk.csi.azure.com (csi-translation-lib azure_disk.go). */
#include <errno.h>
#include <strings.h>

#include "k8s/csimigration/internal.h"
#include "systemd/errormsg.h"

#define DRIVER "disk.csi.azure.com"

/* Only managed disks migrate; kind unset counts as Managed (objects read
 * from an API server have it set: its default is "Shared"). */
static int check_kind(const K8sInTreeSource *s, char **ret_error) {
        if (s->azure_kind && strcasecmp(s->azure_kind, "Managed") != 0)
                return error_message(ret_error, -EINVAL, "kind(%s) is not supported in csi migration",
                                     s->azure_kind);
        return 0;
}

/* handle: the diskURI; attributes kind=Managed, cachingmode, fstype.  A
 * PV's cachingMode is copied as it is ("" included); an inline volume's
 * only when not "". */
static int csi_set(const K8sInTreeSource *s, bool inline_volume, K8sPersistentVolume *pv) {
        int r;

        r = migration_csi_new(pv, DRIVER, s->volume_id, s->read_only, s->fs_type);
        if (r < 0)
                return r;
        if (s->caching_mode && (!inline_volume || *s->caching_mode) &&
            (r = migration_map_set(&pv->csi->volume_attributes, "cachingmode", s->caching_mode)) < 0)
                return r;
        if (s->fs_type && (r = migration_map_set(&pv->csi->volume_attributes, "fstype", s->fs_type)) < 0)
                return r;
        return migration_map_set(&pv->csi->volume_attributes, "kind", "Managed");
}

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        int r;

        r = check_kind(s, ret_error);
        if (r < 0)
                return r;
        /* No topology translation here in the lib. */
        return csi_set(s, false, pv);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        int r;

        r = check_kind(s, ret_error);
        if (r < 0)
                return r;
        /* The name is the disk URI itself. */
        r = migration_name_set(pv, "%s", strempty(s->volume_id));
        if (r < 0)
                return r;
        r = csi_set(s, true, pv);
        if (r < 0)
                return r;
        return migration_access_modes_set(pv, "ReadWriteOnce");
}

const MigrationPlugin migration_plugin_azure_disk = {
        .kind = K8S_IN_TREE_AZURE_DISK,
        .plugin = "kubernetes.io/azure-disk",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
