/* SPDX-License-Identifier: Apache-2.0 */
/* The projected kind (volume/kind.h): kubelet's kubernetes.io/projected,
 * pkg/volume/projected.  Its sources' files, in the order of the sources
 * (a later one wins a path, kubelet's map), in
 * pods/<uid>/volumes/kubernetes.io~projected/<name> on a tmpfs of its own,
 * written and kept up to date by files/filekind.h:
 *   - configMap, secret: the object's keys (files/keyprojection.h), read
 *     through the ClusterView; items, optional, each item's mode, else the
 *     volume's defaultMode;
 *   - downwardAPI: the pod's fields (files/downward.h);
 *   - serviceAccountToken: a pod-bound token (projected/token.h), mode the
 *     volume's defaultMode, or 0600 owned by the pods' fsUser when the pod
 *     has a common runAsUser (kubelet's FsUserFrom) or an fsGroup (fsGroup's
 *     ownership change then makes it 0640), exactly projected.go's rule;
 *   - clusterTrustBundle: read when the volume is written
 *     (projected/trustbundle.h).
 * The files known from the pod and the objects are the spec's content and
 * digest (refresh_due compares it); a token and a trust bundle are fetched
 * by the publish itself and stand in the digest as their path, mode and
 * owner only, so that a new token does not make every other pod's digest
 * change; their own schedule (the token's renewal, the bundles' re-read)
 * asks for the publish again.  kube-api-access-<5>, the ServiceAccount
 * admission plugin's volume (token 3607 s, kube-root-ca.crt's ca.crt, the
 * namespace), is such a volume and nothing special here. */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "systemd/trace.h"
#include "volume/internal.h"
#include "volume/kinds/files/downward.h"
#include "volume/kinds/files/filekind.h"
#include "volume/kinds/projected/token.h"
#include "volume/kinds/projected/trustbundle.h"
#include "volume/passes/operation.h"

static const FileKindType projected_type = { .kind = &volume_kind_projected, .tmpfs = true, .secret = true };

/* A file filled in by the publish: a token, or a trust bundle. */
typedef struct ProjectedFetch {
        char *path;
        bool token; /* else a clusterTrustBundle */
        /* token */
        char *audience;
        int64_t expiration_seconds;
        /* clusterTrustBundle */
        char *ctb_name, *ctb_signer, *ctb_selector;
        bool ctb_has_selector, ctb_optional;
        bool shadowed; /* a later source wrote the same path: kubelet's map keeps that one */
        size_t index;  /* of its stand-in in the payload, while building */
} ProjectedFetch;

/* VolumeSpec.source: FileSource first, so that filekind's entries read it. */
typedef struct ProjectedSource {
        FileSource files;
        ProjectedFetch *fetch;
        size_t n_fetch;
} ProjectedSource;

static void fetch_done(ProjectedFetch *f) {
        free(f->path);
        free(f->audience);
        free(f->ctb_name);
        free(f->ctb_signer);
        free(f->ctb_selector);
}

static void projected_source_free(void *source) {
        ProjectedSource *s = source;
        if (!s)
                return;
        key_payload_wipe(&s->files.payload);
        for (size_t i = 0; i < s->n_fetch; i++)
                fetch_done(&s->fetch[i]);
        free(s->fetch);
        free(s);
}

static int fetch_copy(ProjectedFetch *to, const ProjectedFetch *from) {
        *to = *from;
        to->path = to->audience = to->ctb_name = to->ctb_signer = to->ctb_selector = NULL;
        if (strdup_or_null(from->path, &to->path) < 0 || strdup_or_null(from->audience, &to->audience) < 0 ||
            strdup_or_null(from->ctb_name, &to->ctb_name) < 0 || strdup_or_null(from->ctb_signer, &to->ctb_signer) < 0 ||
            strdup_or_null(from->ctb_selector, &to->ctb_selector) < 0)
                return -ENOMEM;
        return 0;
}

static void *projected_source_copy(const void *source) {
        const ProjectedSource *from = source;
        FileSource *files = file_source_copy(&from->files);
        ProjectedSource *s;

        if (!files)
                return NULL;
        s = calloc(1, sizeof *s);
        if (!s) {
                file_source_free(files);
                return NULL;
        }
        s->files = *files;
        free(files); /* its payload is s's now */
        if (from->n_fetch > 0) {
                s->fetch = calloc(from->n_fetch, sizeof *s->fetch);
                if (!s->fetch) {
                        projected_source_free(s);
                        return NULL;
                }
        }
        for (size_t i = 0; i < from->n_fetch; i++) {
                s->n_fetch++;
                if (fetch_copy(&s->fetch[i], &from->fetch[i]) < 0) {
                        projected_source_free(s);
                        return NULL;
                }
        }
        return s;
}

/* ---- desire ------------------------------------------------------------------ */

static bool projected_claims(const K8sPodVolume *v) {
        return v->projected != NULL;
}

/* kubelet's FsUserFrom: the runAsUser every init and app container runs
 * as (its own, else the pod's), when they all have one and agree. */
static bool pod_fs_user(const K8sPod *pod, int64_t *ret) {
        bool found = false;
        int64_t user = 0;

        for (size_t pass = 0; pass < 2; pass++) {
                const K8sContainer *cs = pass == 0 ? pod->init_containers : pod->containers;
                size_t n = pass == 0 ? pod->n_init_containers : pod->n_containers;
                for (size_t i = 0; i < n; i++) {
                        int64_t u;
                        if (cs[i].has_run_as_user)
                                u = cs[i].run_as_user;
                        else if (pod->has_run_as_user)
                                u = pod->run_as_user;
                        else
                                return false;
                        if (found && u != user)
                                return false;
                        user = u;
                        found = true;
                }
        }
        *ret = user;
        return found;
}

typedef struct Build {
        const K8sPod *pod;
        const K8sPodVolume *v;
        const ClusterView *view;
        DesiredVolume *dv;
        AtomicPayload payload;
        ProjectedFetch *fetch;
        size_t n_fetch;
        mode_t default_mode;
} Build;

/* A lookup's answer that is no object: waiting (or, optional and absent,
 * nothing to add). 1: go on with obj; 0: nothing to add; <0 error; dv set:
 * stop. */
static int lookup_answer(Build *b, int r, const void *obj, const K8sKind *kind, const char *name, bool optional) {
        if (r == -EAGAIN) {
                b->dv->looking_up = true;
                r = desired_set_text(&b->dv->waiting, "waiting for %s \"%s\" of projected volume \"%s\" to be read",
                                     kind->plural, name, b->v->name);
                return r < 0 ? r : -EAGAIN;
        }
        if (r == -EACCES) {
                const char *m = b->view->lookup_error ? b->view->lookup_error(b->view->userdata, kind, b->pod->meta.namespace, name) : NULL;
                r = isempty(m) ? desired_set_text(&b->dv->waiting, "%s \"%s\" is forbidden", kind->plural, name)
                               : desired_set_text(&b->dv->waiting, "%s", m);
                return r < 0 ? r : -EAGAIN;
        }
        if (r < 0)
                return r;
        if (!obj) {
                if (optional)
                        return 0;
                /* kubelet: "configmaps \"x\" not found"; it may be created. */
                r = desired_set_text(&b->dv->waiting, "%s \"%s\" not found", kind->plural, name);
                return r < 0 ? r : -EAGAIN;
        }
        return 1;
}

static int add_keys(Build *b, const K8sKeyProjection *proj, bool secret) {
        const K8sKind *kind = secret ? &k8s_kind_secret : &k8s_kind_configmap;
        const K8sConfigMap *cm = NULL;
        const K8sSecret *sec = NULL;
        _cleanup_free_ char *error = NULL;
        KeySource src;
        int r;

        if (isempty(proj->name))
                r = 0;
        else if (secret)
                r = b->view->get_secret ? b->view->get_secret(b->view->userdata, b->pod->meta.namespace, proj->name, &sec)
                                        : -EAGAIN;
        else
                r = b->view->get_configmap
                            ? b->view->get_configmap(b->view->userdata, b->pod->meta.namespace, proj->name, &cm)
                            : -EAGAIN;
        r = lookup_answer(b, r, secret ? (const void *) sec : (const void *) cm, kind, strempty(proj->name), proj->optional);
        if (r <= 0)
                return r;
        src = secret ? key_source_secret(sec) : key_source_configmap(cm);
        r = key_projection_append(proj, &src, b->default_mode, &b->payload, &error);
        if (r == -EINVAL) {
                /* A missing key of a non-optional source: it may be added. */
                r = desired_set_text(&b->dv->waiting, "projected volume \"%s\": %s", b->v->name, strempty(error));
                return r < 0 ? r : -EAGAIN;
        }
        return r;
}

static int add_fetch(Build *b, ProjectedFetch *f, mode_t mode, uid_t uid) {
        ProjectedFetch *t = reallocarray(b->fetch, b->n_fetch + 1, sizeof *t);
        if (!t) {
                fetch_done(f);
                return -ENOMEM;
        }
        b->fetch = t;
        f->index = b->payload.n;
        b->fetch[b->n_fetch++] = *f;
        /* The stand-in: path, mode and owner, no bytes. */
        return atomic_payload_add(&b->payload, f->path, "", 0, mode, uid);
}

static int add_source(Build *b, const K8sVolumeProjection *s) {
        int r;

        if (s->other) {
                r = desired_set_text(&b->dv->failed, "projected volume \"%s\": unsupported source \"%s\"", b->v->name,
                                     s->other);
                return r < 0 ? r : -EAGAIN;
        }
        if (s->config_map)
                return add_keys(b, s->config_map, false);
        if (s->secret)
                return add_keys(b, s->secret, true);
        if (s->downward_api) {
                _cleanup_free_ char *error = NULL;
                const K8sNode *node = NULL;
                if (downward_needs_node(s->downward_api)) {
                        node = b->view->get_node ? b->view->get_node(b->view->userdata) : NULL;
                        if (!node) {
                                r = desired_set_text(&b->dv->waiting,
                                                     "projected volume \"%s\" waits for this node's Node object (its "
                                                     "allocatable is a resourceFieldRef's limit a container does not set)",
                                                     b->v->name);
                                return r < 0 ? r : -EAGAIN;
                        }
                }
                r = downward_collect(b->pod, s->downward_api, b->default_mode, node ? &node->allocatable : NULL,
                                     &b->payload, &error);
                if (r == -EINVAL) {
                        r = desired_set_text(&b->dv->failed, "projected volume \"%s\": %s", b->v->name, strempty(error));
                        return r < 0 ? r : -EAGAIN;
                }
                return r;
        }
        if (s->service_account_token) {
                const K8sServiceAccountTokenProjection *t = s->service_account_token;
                ProjectedFetch f = { .token = true, .expiration_seconds = t->expiration_seconds };
                int64_t fs_user = 0;
                bool has_fs_user = pod_fs_user(b->pod, &fs_user);
                /* projected.go: defaultMode, or 0600 with an fsUser or fsGroup
                 * (SetVolumeOwnership then makes it 0640); owned by fsUser. */
                mode_t mode = has_fs_user || b->pod->has_fs_group ? 0600 : b->default_mode;

                if (strdup_or_null(t->path, &f.path) < 0 || strdup_or_null(t->audience, &f.audience) < 0) {
                        fetch_done(&f);
                        return -ENOMEM;
                }
                return add_fetch(b, &f, mode, has_fs_user ? (uid_t) fs_user : ATOMIC_UID_NONE);
        }
        if (s->cluster_trust_bundle) {
                const K8sClusterTrustBundleProjection *c = s->cluster_trust_bundle;
                ProjectedFetch f = { .ctb_has_selector = c->has_label_selector, .ctb_optional = c->optional };

                if (c->label_selector_invalid) {
                        r = desired_set_text(&b->dv->failed, "projected volume \"%s\": the clusterTrustBundle "
                                             "labelSelector cannot be expressed as a selector", b->v->name);
                        return r < 0 ? r : -EAGAIN;
                }
                if (strdup_or_null(c->path, &f.path) < 0 || strdup_or_null(c->name, &f.ctb_name) < 0 ||
                    strdup_or_null(c->signer_name, &f.ctb_signer) < 0 ||
                    strdup_or_null(c->label_selector, &f.ctb_selector) < 0) {
                        fetch_done(&f);
                        return -ENOMEM;
                }
                /* kubelet writes the bundle with the volume's defaultMode. */
                return add_fetch(b, &f, b->default_mode, ATOMIC_UID_NONE);
        }
        return 0;
}

static void build_done(Build *b) {
        key_payload_wipe(&b->payload);
        for (size_t i = 0; i < b->n_fetch; i++)
                fetch_done(&b->fetch[i]);
        free(b->fetch);
}

static int projected_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block,
                            DesiredVolume *dv) {
        Build b = { .pod = pod, .v = v, .view = view, .dv = dv, .default_mode = (mode_t) v->projected->default_mode };
        ProjectedSource *ps;
        FileSource *files;
        const char *problem = NULL;
        int r = 0;

        if (k8s_pod_volume_validate(v, &problem) < 0)
                return desired_set_text(&dv->failed, "projected volume \"%s\" is invalid: %s", v->name, strempty(problem));
        if (block)
                return desired_set_text(&dv->failed,
                                        "projected volume \"%s\" is used in volumeDevices; it is a file system only", v->name);
        for (size_t i = 0; r >= 0 && i < v->projected->n_sources; i++)
                r = add_source(&b, &v->projected->sources[i]);
        if (r == -EAGAIN) { /* waiting or failed is set */
                build_done(&b);
                return 0;
        }
        if (r < 0) {
                build_done(&b);
                return r;
        }
        for (size_t i = 0; i < b.payload.n; i++) {
                const char *why = NULL;
                if (atomic_payload_validate_path(b.payload.files[i].path, &why) < 0) {
                        r = desired_set_text(&dv->failed, "projected volume \"%s\": invalid path \"%s\": %s", v->name,
                                             b.payload.files[i].path, strempty(why));
                        build_done(&b);
                        return r;
                }
        }
        /* A fetched file a later source overwrote is not fetched (kubelet's
         * map keeps the later one); the payload's order is the sources'. */
        for (size_t i = 0; i < b.n_fetch; i++)
                for (size_t j = b.fetch[i].index + 1; j < b.payload.n; j++)
                        if (streq(b.payload.files[j].path, b.fetch[i].path))
                                b.fetch[i].shadowed = true;
        files = file_source_new(&b.payload, true);
        if (!files) {
                build_done(&b);
                return -ENOMEM;
        }
        ps = calloc(1, sizeof *ps);
        if (!ps) {
                file_source_free(files);
                build_done(&b);
                return -ENOMEM;
        }
        ps->files = *files;
        free(files);
        ps->fetch = TAKE_PTR(b.fetch);
        ps->n_fetch = b.n_fetch;
        b.n_fetch = 0;
        build_done(&b);
        return file_kind_spec(&projected_type, pod, v->name, (FileSource *) ps, dv);
}

/* ---- the node-wide state: tokens, the bundles' re-read ------------------------- */

struct ProjectedState {
        TokenCache *tokens;
        char *allocatable; /* the Node's allocatable last seen, "k=v\n..." */
};

/* The Node's allocatable changed (its first sight too): a downwardAPI file
 * whose limit the container does not set follows it, so the pods with
 * downwardAPI or projected volumes, or volumes waiting, are built again
 * (their digests keep every other pod's files as they are).  Other Node
 * updates (volumesInUse, annotations, heartbeats) cost a comparison. */
static void projected_node_changed(VolumeManager *m, const K8sNode *node) {
        _cleanup_free_ char *now = NULL;
        void *v;

        if (!m->projected || !node || downward_format_map(&node->allocatable, &now) < 0 ||
            streq_ptr(now, m->projected->allocatable))
                return;
        free(m->projected->allocatable);
        m->projected->allocatable = TAKE_PTR(now);
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &v);) {
                PodEntry *e = v;
                bool concerned = false;
                for (size_t j = 0; e->desired && !concerned && j < e->desired->n_volumes; j++) {
                        const VolumeSpec *s = e->desired->volumes[j].spec;
                        concerned = !s || s->kind == &volume_kind_projected || s->kind == &volume_kind_downwardapi;
                }
                if (!concerned)
                        continue;
                e->dirty = true;
                manager_schedule_pod_pass(m, e->uid);
        }
}

static int projected_setup(VolumeManager *m) {
        m->projected = calloc(1, sizeof *m->projected);
        if (!m->projected)
                return -ENOMEM;
        m->projected->tokens = token_cache_new(m->k8s);
        return m->projected->tokens ? 0 : -ENOMEM;
}

static void projected_free(VolumeManager *m) {
        if (!m->projected)
                return;
        token_cache_free(m->projected->tokens);
        free(m->projected->allocatable);
        free(m->projected);
        m->projected = NULL;
}

static TokenRequestArgs token_args(const PodInfo *pod, const ProjectedFetch *f) {
        return (TokenRequestArgs){
                .namespace = pod->namespace,
                .service_account = pod->service_account,
                .pod_name = pod->name,
                .pod_uid = pod->uid,
                .audience = f->audience,
                .expiration_seconds = f->expiration_seconds,
        };
}

static uint64_t realtime_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* ---- publish: fetch the tokens and bundles, then filekind writes ---------------- */

typedef struct Fill {
        Operation *op;
        size_t n_fetch;
        unsigned pending;
        int error;
        char *message;
        uint8_t **data; /* per fetch: a bundle's bytes */
        size_t *size;
} Fill;

static void fill_free(Fill *fl) {
        for (size_t i = 0; i < fl->n_fetch; i++)
                free(fl->data[i]);
        free(fl->data);
        free(fl->size);
        free(fl->message);
        free(fl);
}

static AtomicPayloadFile *payload_file(ProjectedSource *ps, const char *path) {
        AtomicPayloadFile *found = NULL;
        for (size_t i = 0; i < ps->files.payload.n; i++)
                if (streq(ps->files.payload.files[i].path, path))
                        found = &ps->files.payload.files[i];
        return found;
}

static int set_file(AtomicPayloadFile *file, const void *data, size_t size) {
        uint8_t *copy = malloc(size + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, data, size);
        copy[size] = 0;
        if (file->data)
                explicit_bzero(file->data, file->size);
        free(file->data);
        file->data = copy;
        file->size = size;
        return 0;
}

/* Every fetch answered: the bytes into the operation's copy of the payload
 * (its digest stays the stand-ins', as the desired one), then the write. */
static void fill_finish(Fill *fl) {
        Operation *op = fl->op;
        ProjectedSource *ps = op->spec->source;
        uint64_t now = realtime_usec();
        int r = 0;

        if (fl->error < 0) {
                LogFields f = operation_fields(op);
                _cleanup_free_ char *message = TAKE_PTR(fl->message);
                int error = fl->error;

                fill_free(fl);
                /* The API server's words (never a token); the backoff retries. */
                log_fields(LOG_ERR, &f, "Projected volume \"%s\" of pod %s cannot be set up: %s; retrying with backoff",
                           op->spec_name, strempty(op->pod.key), strempty(message));
                operation_fail(op, error, false, "%s", strempty(message));
                return;
        }
        for (size_t i = 0; r >= 0 && i < ps->n_fetch; i++) {
                ProjectedFetch *pf = &ps->fetch[i];
                AtomicPayloadFile *file;
                if (pf->shadowed)
                        continue;
                file = payload_file(ps, pf->path);
                if (!file)
                        continue;
                if (pf->token) {
                        TokenRequestArgs a = token_args(&op->pod, pf);
                        const char *token;
                        size_t size;
                        r = token_cache_get(op->m->projected->tokens, &a, now, &token, &size);
                        if (r == -ENOENT) {
                                /* Issued and already due: a clock jump, or a
                                 * token shorter than a pass; use it, renew later. */
                                r = token_cache_get(op->m->projected->tokens, &a, 0, &token, &size);
                        }
                        if (r >= 0)
                                r = set_file(file, token, size);
                } else
                        r = set_file(file, fl->data[i] ?: (uint8_t *) "", fl->data[i] ? fl->size[i] : 0);
        }
        fill_free(fl);
        if (r < 0) {
                operation_fail(op, r, false, "the token of the pod is not at hand (%s); retrying", strerror(-r));
                return;
        }
        file_kind_run(&projected_type, op);
}

static void fill_answer(Fill *fl, int error, const char *message) {
        if (error < 0 && fl->error >= 0) {
                fl->error = error;
                free(fl->message);
                fl->message = strdup(strempty(message));
        }
        if (--fl->pending == 0)
                fill_finish(fl);
}

static void on_token(int error, const char *message, void *userdata) {
        Fill *fl = userdata;
        _cleanup_free_ char *m = NULL;

        /* kubelet's words: "failed to fetch token: <the API server's>". */
        if (error < 0 && asprintf(&m, "failed to fetch token: %s", strempty(message)) < 0)
                m = NULL;
        fill_answer(fl, error, m ?: message);
}

typedef struct BundleWait {
        Fill *fl;
        size_t index;
} BundleWait;

static void on_bundle(int error, const char *message, uint8_t *pem, size_t size, void *userdata) {
        BundleWait *w = userdata;
        Fill *fl = w->fl;

        if (error >= 0) {
                fl->data[w->index] = pem;
                fl->size[w->index] = size;
        } else
                free(pem);
        free(w);
        fill_answer(fl, error, message);
}

/* After a restart the cache is empty, but the token written before is on
 * the tmpfs (which survived, or this is no restart at all): it is taken
 * back with its version's time as its issue time, so that a restart
 * rewrites nothing; it is renewed on its schedule.  (A server that capped
 * the lifetime below expirationSeconds makes that schedule late: the real
 * lifetime is not on disk.  Such a cap is --service-account-max-token-
 * expiration, which is at least the 3607 s of kube-api-access.) */
static void seed_from_disk(Operation *op, const ProjectedFetch *pf, const TokenRequestArgs *a) {
        _cleanup_close_ int fd = -1, vfd = -1, ffd = -1;
        char version[256];
        struct stat st;
        ssize_t n;
        char *buf;

        if (token_cache_refresh_at(op->m->projected->tokens, a) != 0)
                return;
        if (root_dir_open_dir(op->m->root, op->target, &fd) < 0)
                return;
        n = readlinkat(fd, ATOMIC_DATA_DIR, version, sizeof version - 1);
        if (n <= 2 || version[0] != '.' || version[1] != '.' || memchr(version, '/', (size_t) n))
                return;
        version[n] = '\0';
        vfd = openat(fd, version, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (vfd < 0)
                return;
        ffd = openat(vfd, pf->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (ffd < 0 || fstat(ffd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > 65536)
                return;
        buf = calloc(1, (size_t) st.st_size + 1);
        if (!buf)
                return;
        n = read(ffd, buf, (size_t) st.st_size);
        if (n == st.st_size)
                (void) token_cache_seed(op->m->projected->tokens, a, buf, (size_t) n,
                                        (uint64_t) st.st_mtim.tv_sec * USEC_PER_SEC + (uint64_t) st.st_mtim.tv_nsec / 1000);
        explicit_bzero(buf, (size_t) st.st_size);
        free(buf);
}

static void publish(Operation *op) {
        ProjectedSource *ps = op->spec->source;
        uint64_t now = realtime_usec();
        Fill *fl;
        int r = 0;

        fl = calloc(1, sizeof *fl);
        if (!fl || (ps->n_fetch > 0 && (!(fl->data = calloc(ps->n_fetch, sizeof *fl->data)) ||
                                         !(fl->size = calloc(ps->n_fetch, sizeof *fl->size))))) {
                if (fl) {
                        free(fl->data);
                        free(fl);
                }
                operation_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        fl->op = op;
        fl->n_fetch = ps->n_fetch;
        if (ps->n_fetch > 0) {
                LogFields f = operation_fields(op);
                log_fields(LOG_DEBUG, &f, "Fetching %zu token(s) or trust bundle(s) for projected volume \"%s\" of pod %s",
                           ps->n_fetch, op->spec_name, strempty(op->pod.key));
        }
        fl->pending = 1; /* this function's own, so that no answer finishes it early */
        for (size_t i = 0; r >= 0 && i < ps->n_fetch; i++) {
                ProjectedFetch *pf = &ps->fetch[i];
                if (pf->shadowed)
                        continue;
                if (pf->token) {
                        TokenRequestArgs a = token_args(&op->pod, pf);
                        const char *token;
                        size_t size;
                        seed_from_disk(op, pf, &a);
                        if (token_cache_get(op->m->projected->tokens, &a, now, &token, &size) >= 0)
                                continue;
                        fl->pending++;
                        r = token_cache_request(op->m->projected->tokens, &a, on_token, fl, NULL);
                        if (r < 0)
                                fl->pending--;
                } else {
                        BundleWait *w = calloc(1, sizeof *w);
                        if (!w) {
                                r = -ENOMEM;
                                break;
                        }
                        *w = (BundleWait){ .fl = fl, .index = i };
                        fl->pending++;
                        r = trustbundle_fetch(op->m->k8s, pf->ctb_name, pf->ctb_signer, pf->ctb_has_selector,
                                              pf->ctb_selector, pf->ctb_optional, on_bundle, w);
                        if (r < 0) {
                                fl->pending--;
                                free(w);
                        }
                }
        }
        if (r < 0)
                fill_answer(fl, r, "cannot ask the API server");
        else
                fill_answer(fl, 0, NULL);
}

static void projected_run(Operation *op) {
        if (op->kind == OP_PUBLISH && op->spec && op->spec->source)
                publish(op);
        else
                file_kind_run(&projected_type, op);
}

/* The bundles are read again this often (kubelet follows them with an
 * informer and writes on its next sync of the pod, about a minute). */
#define BUNDLE_REREAD_USEC USEC_PER_MINUTE

static void projected_outcome(Operation *op, bool success) {
        const ProjectedSource *ps = op->spec ? op->spec->source : NULL;
        ActualPublish *pub;

        file_kind_outcome(&projected_type, op, success);
        if (op->kind != OP_PUBLISH || !success || !ps)
                return;
        pub = hashmap_get(op->av->publishes, op->pod.uid);
        if (!pub)
                return;
        pub->republish_at = 0;
        for (size_t i = 0; i < ps->n_fetch; i++)
                if (!ps->fetch[i].token && !ps->fetch[i].shadowed) {
                        uint64_t now = 0;
                        (void) sd_event_now(op->m->event, CLOCK_MONOTONIC, &now);
                        pub->republish_at = now + BUNDLE_REREAD_USEC;
                        break;
                }
}

/* The pod's tokens go with its last projected volume (kubelet's
 * DeleteServiceAccountToken after TearDown). */
static void projected_ended(VolumeManager *m, const Operation *op) {
        void *v;

        if (op->kind != OP_UNPUBLISH || !op->pod.uid || !m->projected)
                return;
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &v);) {
                const ActualVolume *av = v;
                if (av->kind == &volume_kind_projected && av != op->av && hashmap_get(av->publishes, op->pod.uid))
                        return;
        }
        token_cache_forget_pod(m->projected->tokens, op->pod.uid);
}

static bool projected_refresh_due(VolumeManager *m, const ActualVolume *av, ActualPublish *pub, uint64_t now,
                                  uint64_t *next_wake) {
        PodEntry *e = hashmap_get(m->pod_entries, pub->pod_uid);
        const DesiredVolume *dv;
        const ProjectedSource *ps;
        uint64_t now_rt;

        if (file_kind_refresh_due(m, av, pub, now, next_wake))
                return true;
        if (!e || !e->desired || pub->state != PUBLISH_DONE || pub->stale)
                return false;
        dv = desired_pod_find_volume(e->desired, pub->spec_name);
        if (!dv || !dv->spec || dv->spec->kind != av->kind || !dv->spec->source)
                return false;
        ps = dv->spec->source;
        now_rt = realtime_usec();
        for (size_t i = 0; i < ps->n_fetch; i++) {
                const ProjectedFetch *pf = &ps->fetch[i];
                PodInfo pod = { .uid = e->desired->uid, .namespace = e->desired->namespace, .name = e->desired->name,
                                .service_account = e->desired->service_account };
                TokenRequestArgs a;
                uint64_t at;

                if (!pf->token || pf->shadowed)
                        continue;
                a = token_args(&pod, pf);
                at = token_cache_refresh_at(m->projected->tokens, &a);
                if (at == 0 || at <= now_rt)
                        return true;
                *next_wake = MIN(*next_wake, now + (at - now_rt));
        }
        if (pub->republish_at != 0) {
                if (now >= pub->republish_at)
                        return true;
                *next_wake = MIN(*next_wake, pub->republish_at);
        }
        return false;
}

static void projected_reconstruct(VolumeManager *m, ReconstructScan *c, const char *pod_uid, const char *spec_name) {
        file_kind_reconstruct(&projected_type, m, c, pod_uid, spec_name);
}

const VolumeKind volume_kind_projected = {
        .name = "projected",
        .plugin_name = "kubernetes.io/projected",
        .pod_dir = "kubernetes.io~projected",
        .mount_attributes = VOLUME_ATTR_READ_ONLY, /* kubelet: the container never writes them */
        .call_names = {
                [OP_PUBLISH] = "SetUp",
                [OP_UNPUBLISH] = "TearDown",
        },
        .setup = projected_setup,
        .free = projected_free,
        .ended = projected_ended,
        .node_changed = projected_node_changed,
        .claims = projected_claims,
        .desire = projected_desire,
        .source_copy = projected_source_copy,
        .source_free = projected_source_free,
        .paths = file_kind_paths,
        .refresh_due = projected_refresh_due,
        .run = projected_run,
        .outcome = projected_outcome,
        .reconstruct_publish = projected_reconstruct,
};
