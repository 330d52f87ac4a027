/* SPDX-License-Identifier: Apache-2.0 */
/* The in-tree cloud sources CSI migration serves (k8s/csimigration.h), of a
 * PV spec or a pod volume: typed, decoded only when there, so a pod without
 * them costs nothing but the one pointer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/objects-internal.h"
#include "k8s/objects-volumes.h"
#include "systemd/macro.h"

static const char *const keys[_K8S_IN_TREE_KIND_MAX] = {
        [K8S_IN_TREE_AWS_EBS] = "awsElasticBlockStore",
        [K8S_IN_TREE_GCE_PD] = "gcePersistentDisk",
        [K8S_IN_TREE_AZURE_DISK] = "azureDisk",
        [K8S_IN_TREE_AZURE_FILE] = "azureFile",
        [K8S_IN_TREE_CINDER] = "cinder",
        [K8S_IN_TREE_VSPHERE] = "vsphereVolume",
        [K8S_IN_TREE_PORTWORX] = "portworxVolume",
};

const char *k8s_in_tree_source_key(K8sInTreeKind kind) {
        return kind >= 0 && kind < _K8S_IN_TREE_KIND_MAX ? keys[kind] : NULL;
}

K8sInTreeSource *k8s_in_tree_source_free(K8sInTreeSource *s) {
        if (!s)
                return NULL;
        free(s->volume_id);
        free(s->fs_type);
        free(s->disk_name);
        free(s->caching_mode);
        free(s->azure_kind);
        free(s->secret_name);
        free(s->secret_namespace);
        free(s->storage_policy_name);
        free(s->storage_policy_id);
        free(s);
        return NULL;
}

static int string_default(char **s, const char *def) {
        if (*s)
                return 0;
        *s = strdup(def);
        return *s ? 0 : -ENOMEM;
}

static int get_partition(JsonPath *p, const cJSON *o, K8sInTreeSource *s) {
        bool present = false;
        int64_t v = 0;

        TRY(k8s_json_get_int(p, o, "partition", INT32_MIN, INT32_MAX, &present, &v));
        s->partition = present ? (int32_t) v : 0;
        return 0;
}

/* The fields of one source; required ones are optional here: API
 * validation requires them, and a translation of an empty one fails or
 * yields what the lib yields, for this volume only. */
static int source_decode(JsonPath *p, const cJSON *o, bool pod_volume, K8sInTreeSource *s) {
        const cJSON *ref;

        TRY(k8s_json_get_string(p, o, "fsType", JSON_OPTIONAL, &s->fs_type));
        TRY(k8s_json_get_bool(p, o, "readOnly", false, &s->read_only));
        switch (s->kind) {
        case K8S_IN_TREE_AWS_EBS:
        case K8S_IN_TREE_CINDER:
        case K8S_IN_TREE_PORTWORX:
                TRY(k8s_json_get_string(p, o, "volumeID", JSON_OPTIONAL, &s->volume_id));
                if (s->kind == K8S_IN_TREE_AWS_EBS)
                        TRY(get_partition(p, o, s));
                if (s->kind != K8S_IN_TREE_CINDER)
                        break;
                /* PV: a SecretReference {name, namespace}; pod: a LocalObjectReference. */
                DECODE_OPTIONAL_OBJECT(p, o, "secretRef", ref,
                                       k8s_json_get_string(p, ref, "name", JSON_OPTIONAL, &s->secret_name));
                if (!pod_volume && ref)
                        TRY(k8s_json_get_string(p, ref, "namespace", JSON_OPTIONAL, &s->secret_namespace));
                break;
        case K8S_IN_TREE_GCE_PD:
                TRY(k8s_json_get_string(p, o, "pdName", JSON_OPTIONAL, &s->volume_id));
                TRY(get_partition(p, o, s));
                break;
        case K8S_IN_TREE_AZURE_DISK:
                TRY(k8s_json_get_string(p, o, "diskName", JSON_OPTIONAL, &s->disk_name));
                TRY(k8s_json_get_string(p, o, "diskURI", JSON_OPTIONAL, &s->volume_id));
                TRY(k8s_json_get_string(p, o, "cachingMode", JSON_OPTIONAL, &s->caching_mode));
                TRY(k8s_json_get_string(p, o, "kind", JSON_OPTIONAL, &s->azure_kind));
                /* SetDefaults_AzureDiskVolumeSource */
                TRY(string_default(&s->caching_mode, "ReadWrite"));
                TRY(string_default(&s->azure_kind, "Shared"));
                TRY(string_default(&s->fs_type, "ext4"));
                break;
        case K8S_IN_TREE_AZURE_FILE:
                TRY(k8s_json_get_string(p, o, "secretName", JSON_OPTIONAL, &s->secret_name));
                TRY(k8s_json_get_string(p, o, "shareName", JSON_OPTIONAL, &s->volume_id));
                if (!pod_volume)
                        TRY(k8s_json_get_string(p, o, "secretNamespace", JSON_OPTIONAL, &s->secret_namespace));
                break;
        case K8S_IN_TREE_VSPHERE:
                TRY(k8s_json_get_string(p, o, "volumePath", JSON_OPTIONAL, &s->volume_id));
                TRY(k8s_json_get_string(p, o, "storagePolicyName", JSON_OPTIONAL, &s->storage_policy_name));
                TRY(k8s_json_get_string(p, o, "storagePolicyID", JSON_OPTIONAL, &s->storage_policy_id));
                break;
        default:
                return -EINVAL;
        }
        return 0;
}

int k8s_in_tree_source_decode(JsonPath *p, const cJSON *source, bool pod_volume, K8sInTreeSource **ret) {
        /* The first one in the object, as k8s_other_volume_source() finds
         * the first other one; a valid object has one source at most. */
        for (const cJSON *c = source->child; c; c = c->next)
                for (K8sInTreeKind k = 0; c->string && k < _K8S_IN_TREE_KIND_MAX; k++) {
                        const cJSON *o;
                        if (!streq(c->string, keys[k]))
                                continue;
                        TRY(k8s_json_get_object(p, source, keys[k], JSON_OPTIONAL, &o));
                        if (!o)
                                return 0; /* null: absent */
                        K8sInTreeSource *s = calloc(1, sizeof *s);
                        if (!s)
                                return -ENOMEM;
                        s->kind = k;
                        *ret = s;
                        size_t saved = k8s_json_path_push(p, keys[k]);
                        TRY(source_decode(p, o, pod_volume, s));
                        k8s_json_path_pop(p, saved);
                        return 0;
                }
        return 0;
}
