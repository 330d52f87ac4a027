/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>

#include "k8s/csimigration/internal.h"

#define DRIVER "disk.csi.azure.com"

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        return migration_error(ret_error, "not yet");
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        return migration_error(ret_error, "not yet");
}

const MigrationPlugin migration_plugin_azure_disk = {
        .kind = K8S_IN_TREE_AZURE_DISK,
        .plugin = "kubernetes.io/azure-disk",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
