/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <string.h>

#include "k8s/objects.h"

/* The rules of API validation (pkg/apis/core/validation) on what the
 * decoders keep as written: a pod that breaks them did not come from a
 * validating API server, or came from a newer one. */

static bool one_of(const char *value, const char *const *allowed, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (streq(value, allowed[i]))
                        return true;
        return false;
}

static int fail(const char **ret_problem, const char *problem, int error) {
        if (ret_problem)
                *ret_problem = problem;
        return error;
}

static int downward_api_validate(const K8sDownwardAPIProjection *d, const char **ret_problem) {
        for (size_t i = 0; i < d->n_items; i++) {
                const K8sDownwardAPIFile *f = &d->items[i];
                if (!f->field_ref == !f->resource_field_ref)
                        return fail(ret_problem, "a downwardAPI item needs exactly one of fieldRef and resourceFieldRef",
                                    -EINVAL);
                /* A volume has no container of its own to default to. */
                if (f->resource_field_ref && !f->resource_field_ref->container_name)
                        return fail(ret_problem, "a downwardAPI resourceFieldRef in a volume needs containerName",
                                    -EINVAL);
        }
        return 0;
}

static int projection_validate(const K8sVolumeProjection *s, const char **ret_problem) {
        unsigned n = !!s->config_map + !!s->secret + !!s->downward_api + !!s->service_account_token +
                     !!s->cluster_trust_bundle + !!s->other;

        if (n != 1)
                return fail(ret_problem, n ? "a projected source has more than one member" : "a projected source is empty",
                            -EINVAL);
        if (s->other)
                return fail(ret_problem, "a projected source of a kind kvolumed does not know", -EOPNOTSUPP);
        if (s->downward_api)
                return downward_api_validate(s->downward_api, ret_problem);
        if (s->service_account_token) {
                int64_t e = s->service_account_token->expiration_seconds;
                if (e < 600 || e > (int64_t) UINT32_MAX)
                        return fail(ret_problem, "serviceAccountToken expirationSeconds is not within [600, 2^32]",
                                    -EINVAL);
        }
        if (s->cluster_trust_bundle) {
                const K8sClusterTrustBundleProjection *b = s->cluster_trust_bundle;
                if (!b->name == !b->signer_name)
                        return fail(ret_problem, "clusterTrustBundle needs exactly one of name and signerName", -EINVAL);
                if (b->name && b->has_label_selector)
                        return fail(ret_problem, "clusterTrustBundle labelSelector goes with signerName, not name",
                                    -EINVAL);
                if (b->label_selector_invalid)
                        return fail(ret_problem, "clusterTrustBundle labelSelector is not a valid selector", -EINVAL);
        }
        return 0;
}

int k8s_pod_volume_validate(const K8sPodVolume *v, const char **ret_problem) {
        static const char *const host_path_types[] = { "",     "DirectoryOrCreate", "Directory",  "FileOrCreate",
                                                       "File", "Socket",            "CharDevice", "BlockDevice" };
        unsigned n = !!v->csi + !!v->claim_name + v->ephemeral + !!v->config_map + !!v->secret + !!v->downward_api +
                     !!v->projected + !!v->empty_dir + !!v->host_path + !!v->in_tree + !!v->other_source;
        int r;

        if (n != 1)
                return fail(ret_problem, n ? "more than one volume source" : "no volume source", -EINVAL);
        if (v->other_source)
                return fail(ret_problem, "a volume type kvolumed does not set up", -EOPNOTSUPP);
        if (v->host_path && !one_of(v->host_path->type, host_path_types, ELEMENTSOF(host_path_types)))
                return fail(ret_problem, "hostPath type is not a known type", -EINVAL);
        if (v->empty_dir) {
                const char *m = v->empty_dir->medium;
                if (!streq(m, "") && !streq(m, "Memory") && !streq(m, "HugePages") && strncmp(m, "HugePages-", 10) != 0)
                        return fail(ret_problem, "emptyDir medium is not \"\", Memory or HugePages[-<size>]", -EINVAL);
        }
        if (v->downward_api && (r = downward_api_validate(v->downward_api, ret_problem)) < 0)
                return r;
        if (v->projected)
                for (size_t i = 0; i < v->projected->n_sources; i++)
                        if ((r = projection_validate(&v->projected->sources[i], ret_problem)) < 0)
                                return r;
        return fail(ret_problem, NULL, 0);
}

int k8s_volume_mount_validate(const K8sVolumeMount *m, const K8sContainer *c, const char **ret_problem) {
        static const char *const propagation[] = { "None", "HostToContainer", "Bidirectional" };
        static const char *const rro[] = { "Disabled", "IfPossible", "Enabled" };

        if (m->sub_path && m->sub_path_expr)
                return fail(ret_problem, "subPath and subPathExpr are mutually exclusive", -EINVAL);
        if (m->mount_propagation && !one_of(m->mount_propagation, propagation, ELEMENTSOF(propagation)))
                return fail(ret_problem, "mountPropagation is not None, HostToContainer or Bidirectional", -EINVAL);
        if (m->mount_propagation && streq(m->mount_propagation, "Bidirectional") && !(c && c->privileged))
                return fail(ret_problem, "Bidirectional mount propagation is available only to privileged containers",
                            -EPERM);
        if (m->recursive_read_only) {
                if (!one_of(m->recursive_read_only, rro, ELEMENTSOF(rro)))
                        return fail(ret_problem, "recursiveReadOnly is not Disabled, IfPossible or Enabled", -EINVAL);
                if (!streq(m->recursive_read_only, "Disabled")) {
                        if (!m->read_only)
                                return fail(ret_problem, "recursiveReadOnly needs readOnly", -EINVAL);
                        if (m->mount_propagation && !streq(m->mount_propagation, "None"))
                                return fail(ret_problem, "recursiveReadOnly needs mountPropagation None", -EINVAL);
                }
        }
        return fail(ret_problem, NULL, 0);
}
