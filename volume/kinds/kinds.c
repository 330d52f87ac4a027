/* SPDX-License-Identifier: Apache-2.0 */
/* The kinds of volume kvolumed sets up (volume/kind.h): the one place that
 * lists them.  A new kind is one line here. */
#include <stddef.h>
#include <string.h>

#include "systemd/macro.h"
#include "volume/kind.h"

static const VolumeKind *const builtin_kinds[] = {
        &volume_kind_csi,
        &volume_kind_configmap,
        &volume_kind_secret,
        &volume_kind_empty_dir,
        &volume_kind_host_path,
        &volume_kind_local,
        &volume_kind_downwardapi,
        &volume_kind_projected,
        NULL,
};

static const VolumeKind *const *kinds = builtin_kinds;

const VolumeKind *const *volume_kinds(void) {
        return kinds;
}

void volume_kinds_set_for_tests(const VolumeKind *const *k) {
        kinds = k ?: builtin_kinds;
}

const VolumeKind *volume_kind_of_pod_volume(const K8sPodVolume *v) {
        for (const VolumeKind *const *k = kinds; *k; k++)
                if ((*k)->claims && (*k)->claims(v))
                        return *k;
        return NULL;
}

const VolumeKind *volume_kind_of_pv(const K8sPersistentVolume *pv) {
        for (const VolumeKind *const *k = kinds; *k; k++)
                if ((*k)->claims_pv && (*k)->claims_pv(pv))
                        return *k;
        return NULL;
}

/* The kind whose string at "offset" (a field of VolumeKind) is "value". */
static const VolumeKind *find_by(size_t offset, const char *value) {
        for (const VolumeKind *const *k = kinds; *k; k++)
                if (streq_ptr(*(const char *const *) ((const char *) *k + offset), value))
                        return *k;
        return NULL;
}

const VolumeKind *volume_kind_by_name(const char *name) {
        return find_by(offsetof(VolumeKind, name), name);
}

const VolumeKind *volume_kind_by_plugin_name(const char *plugin_name) {
        return find_by(offsetof(VolumeKind, plugin_name), plugin_name);
}

const VolumeKind *volume_kind_by_pod_dir(const char *pod_dir) {
        return find_by(offsetof(VolumeKind, pod_dir), pod_dir);
}

const char *volume_kind_call_name(const VolumeKind *k, OpKind op) {
        if (k && op >= 0 && op < _OP_KIND_MAX && k->call_names[op])
                return k->call_names[op];
        return op_kind_to_string(op);
}
