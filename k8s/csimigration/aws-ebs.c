/* SPDX-License-Identifier: Apache-2.0 */
/* awsElasticBlockStore → ebs.csi.aws.com (csi-translation-lib aws_ebs.go). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/csimigration/internal.h"
#include "systemd/errormsg.h"

#define DRIVER "ebs.csi.aws.com"
#define TOPOLOGY_KEY "topology." DRIVER "/zone"

static int unhex(char c) {
        return c >= '0' && c <= '9' ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* The path of an "aws://" URL as Go's url.Parse gives it (the authority cut
 * off, query and fragment too, %XX decoded); NULL *ret_problem on success,
 * else the url.Parse error's text. */
static int url_path(const char *id, char **ret, char **ret_problem) {
        const char *rest = id + strlen("aws://"), *end;
        _cleanup_free_ char *path = NULL;
        size_t n = 0;

        *ret_problem = NULL;
        for (const char *c = id; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f) {
                        *ret_problem = strdup("net/url: invalid control character in URL");
                        return *ret_problem ? 0 : -ENOMEM;
                }
        rest += strcspn(rest, "/?#"); /* the host: "<zone>" or "" */
        end = rest + strcspn(rest, "?#");
        path = malloc(end - rest + 1);
        if (!path)
                return -ENOMEM;
        for (const char *c = rest; c < end; c++) {
                if (*c == '%') {
                        int hi = c + 1 < end ? unhex(c[1]) : -1, lo = c + 2 < end ? unhex(c[2]) : -1;
                        if (hi < 0 || lo < 0) {
                                /* url.EscapeError: up to 3 characters from the % */
                                if (asprintf(ret_problem, "invalid URL escape \"%.*s\"",
                                             (int) MIN((size_t) (end - c), (size_t) 3), c) < 0) {
                                        *ret_problem = NULL;
                                        return -ENOMEM;
                                }
                                return 0;
                        }
                        path[n++] = (char) (hi << 4 | lo);
                        c += 2;
                } else
                        path[n++] = *c;
        }
        path[n] = '\0';
        *ret = TAKE_PTR(path);
        return 0;
}

/* KubernetesVolumeIDToEBSVolumeID: "aws://<zone>/vol-x", "aws:///vol-x" or
 * a bare "vol-x" (taken as it is) → "vol-x". */
static int ebs_volume_id(const char *kubernetes_id, char **ret, char **ret_error) {
        _cleanup_free_ char *path = NULL, *problem = NULL;
        const char *b, *e;
        int r;

        if (strncmp(kubernetes_id, "aws://", 6) != 0)
                return strdup_or_null(kubernetes_id, ret);
        r = url_path(kubernetes_id, &path, &problem);
        if (r < 0)
                return r;
        if (problem)
                return error_message(
                        ret_error, -EINVAL,
                        "failed to translate Kubernetes ID to EBS Volume ID Invalid disk name (%s): "
                        "parse \"%s\": %s",
                        kubernetes_id, kubernetes_id, problem);
        /* strings.Trim(path, "/") then ^vol-[^/]*$ */
        for (b = path; *b == '/'; b++)
                ;
        for (e = b + strlen(b); e > b && e[-1] == '/'; e--)
                ;
        if (e - b < 4 || strncmp(b, "vol-", 4) != 0 || memchr(b, '/', e - b))
                return error_message(
                        ret_error, -EINVAL,
                        "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS "
                        "volume (%s)",
                        kubernetes_id);
        *ret = strndup(b, e - b);
        return *ret ? 0 : -ENOMEM;
}

/* Both set attributes {"partition": "<n>"}, "0" included. */
static int csi_set(const K8sInTreeSource *s, const char *handle, K8sPersistentVolume *pv) {
        char partition[16];
        int r;

        r = migration_csi_new(pv, DRIVER, handle, s->read_only, s->fs_type);
        if (r < 0)
                return r;
        snprintf(partition, sizeof partition, "%" PRIi32, s->partition);
        return migration_map_set(&pv->csi->volume_attributes, "partition", partition);
}

static int translate_pv(const K8sInTreeSource *s, K8sPersistentVolume *pv, char **ret_error) {
        _cleanup_free_ char *handle = NULL;
        int r;

        r = ebs_volume_id(strempty(s->volume_id), &handle, ret_error);
        if (r < 0)
                return r;
        r = csi_set(s, handle, pv);
        if (r < 0)
                return r;
        return migration_topology_from_in_tree(pv, TOPOLOGY_KEY);
}

static int translate_inline(const K8sInTreeSource *s, const char *volume_name, const char *pod_namespace,
                            K8sPersistentVolume *pv, char **ret_error) {
        _cleanup_free_ char *handle = NULL;
        int r;

        r = ebs_volume_id(strempty(s->volume_id), &handle, ret_error);
        if (r < 0)
                return r;
        /* "Must be unique per disk as it is used as the unique part of the staging path" */
        r = migration_name_set(pv, "%s-%s", DRIVER, handle);
        if (r < 0)
                return r;
        r = csi_set(s, handle, pv);
        if (r < 0)
                return r;
        return migration_access_modes_set(pv, "ReadWriteOnce");
}

const MigrationPlugin migration_plugin_aws_ebs = {
        .kind = K8S_IN_TREE_AWS_EBS,
        .plugin = "kubernetes.io/aws-ebs",
        .driver = DRIVER,
        .on = true,
        .translate_pv = translate_pv,
        .translate_inline = translate_inline,
};
