/* SPDX-License-Identifier: Apache-2.0 */
/* gcePersistentDisk → pd.csi.storage.gke.io (csi-translation-lib gce_pd.go). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/csimigration/internal.h"
#include "systemd/errormsg.h"

#define DRIVER "pd.csi.storage.gke.io"
#define TOPOLOGY_KEY "topology.gke.io/zone"
#define UNSPECIFIED "UNSPECIFIED"

/* "partition": the number, or "" for 0. */
static int csi_set(const K8sInTreeSource *s, const char *handle, K8sPersistentVolume *pv) {
        char partition[16] = "";
        int r;

        r = migration_csi_new(pv, DRIVER, handle, s->read_only, s->fs_type);
        if (r < 0)
                return r;
        if (s->partition != 0)
                snprintf(partition, sizeof partition, "%" PRIi32, s->partition);
        return migration_map_set(&pv->csi->volume_attributes, "partition", partition);
}

/* The "map[a:{} b:{}]" Go prints for a sets.String in an error. */
static int format_set(char *const *v, char **ret) {
        size_t size = strlen("map[]") + 1;
        char *s, *p;

        for (char *const *e = v; e && *e; e++)
                size += strlen(*e) + 4;
        s = p = malloc(size);
        if (!s)
                return -ENOMEM;
        p = stpcpy(p, "map[");
        for (char *const *e = v; e && *e; e++)
                p = stpcpy(stpcpy(stpcpy(p, e == v ? "" : " "), *e), ":{}");
        strcpy(p, "]");
        *ret = s;
        return 0;
}

/* gceGetRegionFromZones: every zone "<locale>-<region>-<zone>", one region. */
static int region_of_zones(char *const *zones, char **ret, char **ret_error) {
        _cleanup_(k8s_strv_freep) char **regions = NULL;
        _cleanup_free_ char *set = NULL;
        int r;

        for (char *const *z = zones; z && *z; z++) {
                _cleanup_(k8s_strv_freep) char **parts = NULL;
                _cleanup_free_ char *region = NULL;
                bool seen = false;
                r = migration_split(*z, "-", &parts);
                if (r < 0)
                        return r;
                if (k8s_strv_length(parts) != 3)
                        return error_message(ret_error, -EINVAL,
                                             "failed to get region from zones: zone in unexpected format, "
                                             "expected: {locale}-{region}-{zone}, got: %s",
                                             *z);
                if (asprintf(&region, "%s-%s", parts[0], parts[1]) < 0)
                        return -ENOMEM;
                for (char **e = regions; e && *e; e++)
                        seen = seen || streq(*e, region);
                if (seen)
                        continue;
                size_t n = k8s_strv_length(regions);
                char **c = realloc(regions, (n + 2) * sizeof(char *));
                if (!c)
                        return -ENOMEM;
                regions = c;
                regions[n] = TAKE_PTR(region);
                regions[n + 1] = NULL;
        }
        if (k8s_strv_length(regions) == 1) {
                *ret = TAKE_PTR(regions[0]);
                return 0;
        }
        /* Go prints a map's keys sorted. */
        for (size_t i = 0; regions && regions[i]; i++)
                for (size_t j = i + 1; regions[j]; j++)
                        if (strcmp(regions[i], regions[j]) > 0) {
                                char *t = regions[i];
                                regions[i] = regions[j];
                                regions[j] = t;
                        }
        r = format_set(regions, &set);
        if (r < 0)
                return r;
        return error_message(ret_error, -EINVAL,
                             "failed to get region from zones: multiple or no regions gotten from zones, "
                             "got: %s",
                             set);
}

/* The zone label (beta first, then GA) names the disk's zone, or its zones
 * ("z1__z2") for a regional disk; none: UNSPECIFIED. */
static int volume_handle(const K8sPersistentVolume *pv, const char *pd_name, char **ret, char **ret_error) {
        _cleanup_(k8s_strv_freep) char **zones = NULL;
        _cleanup_free_ char *region = NULL;
        const char *label;
        int r;

        label = k8s_string_map_get(&pv->labels, "failure-domain.beta.kubernetes.io/zone");
        if (isempty(label))
                label = k8s_string_map_get(&pv->labels, "topology.kubernetes.io/zone");
        r = migration_split(strempty(label), LABEL_MULTI_ZONE_DELIMITER, &zones);
        if (r < 0)
                return r;
        if (k8s_strv_length(zones) == 1 && zones[0][0])
                r = asprintf(ret, "projects/%s/zones/%s/disks/%s", UNSPECIFIED, zones[0], pd_name);
        else if (k8s_strv_length(zones) > 1) {
                r = region_of_zones(zones, &region, ret_error);
                if (r < 0)
                        return r;
                r = asprintf(ret, "projects/%s/regions/%s/disks/%s", UNSPECIFIED, region, pd_name);
        } else
                r = asprintf(ret, "projects/%s/zones/%s/disks/%s", UNSPECIFIED, UNSPECIFIED, pd_name);
        return r < 0 ? -ENOMEM : 0;
}

/* backwardCompatibleAccessModes: RWX counts as RWO (in-tree did no
 * validation); RWO wins over ROX; nothing set: RWO; none at all: none. */
static int access_modes(K8sPersistentVolume *pv) {
        bool rwo = false, rox = false;

        if (!pv->access_modes)
                return 0;
        for (char **m = pv->access_modes; *m; m++) {
                rwo = rwo || streq(*m, "ReadWriteOnce") || streq(*m, "ReadWriteMany");
                rox = rox || streq(*m, "ReadOnlyMany");
        }
        return migration_access_modes_set(pv, rox && !rwo ? "ReadOnlyMany" : "ReadWriteOnce");
}

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        _cleanup_free_ char *handle = NULL;
        int r;

        r = volume_handle(pv, strempty(s->volume_id), &handle, ret_error);
        if (r < 0)
                return r;
        r = csi_set(s, handle, pv);
        if (r < 0)
                return r;
        r = migration_topology_from_in_tree(pv, TOPOLOGY_KEY);
        if (r < 0)
                return r;
        return access_modes(pv);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        _cleanup_free_ char *handle = NULL;
        int r;

        if (asprintf(&handle, "projects/%s/zones/%s/disks/%s", UNSPECIFIED, UNSPECIFIED, strempty(s->volume_id)) < 0)
                return -ENOMEM;
        r = migration_name_set(pv, "%s-%s", DRIVER, strempty(s->volume_id));
        if (r < 0)
                return r;
        r = csi_set(s, handle, pv);
        if (r < 0)
                return r;
        /* Filesystem, as every inline volume: k8s_csi_translate_inline(). */
        return migration_access_modes_set(pv, s->read_only ? "ReadOnlyMany" : "ReadWriteOnce");
}

const MigrationPlugin migration_plugin_gce_pd = {
        .kind = K8S_IN_TREE_GCE_PD,
        .plugin = "kubernetes.io/gce-pd",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
