/* SPDX-License-Identifier: Apache-2.0 */
/* azureFile → file.csi.azure.com (csi-translation-lib azure_file.go). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/csimigration/internal.h"
#include "systemd/errormsg.h"

#define DRIVER "file.csi.azure.com"
#define SECRET_PREFIX "azure-storage-account-"
#define SECRET_SUFFIX "-secret"

/* getStorageAccountName: what `azure-storage-account-(.+)-secret` captures
 * (leftmost match, greedy: up to the last "-secret"); else, as the lib
 * falls back to (with a warning), the secret name itself. */
static char *account_name(const char *secret_name) {
        const char *b = strstr(secret_name, SECRET_PREFIX), *last = NULL;

        if (b && b[strlen(SECRET_PREFIX)]) {
                b += strlen(SECRET_PREFIX);
                /* (.+): at least one character before the suffix */
                for (const char *p = strstr(b + 1, SECRET_SUFFIX); p; p = strstr(p + 1, SECRET_SUFFIX))
                        last = p;
        }
        return last ? strndup(b, last - b) : strdup(secret_name);
}

/* handle "<resource group>#<account>#<share>#<name>#<namespace>", attribute
 * sharename, nodeStageSecretRef {secretName, namespace}. */
static int csi_set(const K8sInTreeSource *s, const char *resource_group, const char *name, const char *ns,
                   K8sPersistentVolume *pv) {
        _cleanup_free_ char *account = NULL, *handle = NULL;
        int r;

        account = account_name(strempty(s->secret_name));
        if (!account)
                return -ENOMEM;
        if (asprintf(&handle, "%s#%s#%s#%s#%s", strempty(resource_group), account, strempty(s->volume_id),
                     strempty(name), ns) < 0)
                return -ENOMEM;
        r = migration_csi_new(pv, DRIVER, handle, s->read_only, NULL);
        if (r < 0)
                return r;
        r = migration_map_set(&pv->csi->volume_attributes, "sharename", strempty(s->volume_id));
        if (r < 0)
                return r;
        if (strdup_or_null(strempty(s->secret_name), &pv->csi->node_stage_secret.name) < 0 ||
            strdup_or_null(ns, &pv->csi->node_stage_secret.namespace) < 0)
                return -ENOMEM;
        return 0;
}

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        /* The secret's namespace: the source's, else the claim's (a pod's
         * cannot be assumed here). */
        const char *ns = s->secret_namespace ? s->secret_namespace : pv->has_claim_ref ? pv->claim_namespace : NULL;

        if (isempty(ns))
                return error_message(
                        ret_error, -EINVAL,
                        "could not find a secret namespace in PersistentVolumeSource or ClaimRef");
        return csi_set(s, pv->azure_file_resource_group, pv->meta.name, ns, pv);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        const char *ns = isempty(pod_namespace) ? "default" : pod_namespace;
        int r;

        r = csi_set(s, NULL, volume_name, ns, pv);
        if (r < 0)
                return r;
        /* The handle is the name: unique, the unique part of the staging path. */
        r = migration_name_set(pv, "%s", pv->csi->volume_handle);
        if (r < 0)
                return r;
        return migration_access_modes_set(pv, "ReadWriteMany");
}

const MigrationPlugin migration_plugin_azure_file = {
        .kind = K8S_IN_TREE_AZURE_FILE,
        .plugin = "kubernetes.io/azure-file",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
