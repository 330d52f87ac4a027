/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>

#include "k8s/csimigration/internal.h"

#define DRIVER "pxd.portworx.com"

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        return migration_error(ret_error, "not yet");
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        return migration_error(ret_error, "not yet");
}

const MigrationPlugin migration_plugin_portworx = {
        .kind = K8S_IN_TREE_PORTWORX,
        .plugin = "kubernetes.io/portworx-volume",
        .driver = DRIVER,
        .on = false,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
