/* SPDX-License-Identifier: Apache-2.0 */
/* Drives the k8s/ module for the integration tests: runs the informers
 * kvolumed needs against an API server and prints one JSON line per
 * event, sync and error on stdout; performs writes on command, one command
 * per line on stdin:
 *
 *   volumes-in-use [VOLUME...]
 *   node-id DRIVER [NODE_ID]                       (no NODE_ID: remove)
 *   csinode DRIVER [NODE_ID [KEY,KEY [COUNT]]]     (no NODE_ID: remove)
 *   event NAMESPACE NAME UID TYPE REASON MESSAGE...
 *   get pod|pvc|pv|secret|configmap|va|node|csidriver NAMESPACE|- NAME
 *   va-watch NAME | va-stop NAME
 *   watch configmap|secret|KIND NAMESPACE|- NAME   (one object by name)
 *   stats
 *   quit
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "k8s/auth.h"
#include "k8s/client.h"
#include "k8s/events.h"
#include "k8s/informer.h"
#include "k8s/writers.h"
#include "systemd/curl-loop.h"
#include "systemd/log.h"

typedef struct Harness {
        sd_event *event;
        K8sClient *client;
        K8sEventRecorder *recorder;
        K8sInformer *informers[3];
        K8sInformer *va[16];
        char *node;
        char line[65536];
        size_t line_len;
} Harness;

static void emit(cJSON *j) {
        char *s = cJSON_PrintUnformatted(j);
        if (s) {
                fprintf(stdout, "%s\n", s);
                fflush(stdout);
                free(s);
        }
        cJSON_Delete(j);
}

static cJSON *base(const char *type, K8sInformer *i) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "type", type);
        if (i)
                cJSON_AddStringToObject(j, "kind", k8s_informer_kind(i)->kind);
        return j;
}

static void add_meta(cJSON *j, const char *prefix, const K8sMeta *m) {
        char key[64], buf[600];
        snprintf(key, sizeof key, "%skey", prefix);
        cJSON_AddStringToObject(j, key, k8s_meta_describe(m, buf, sizeof buf));
        snprintf(key, sizeof key, "%srv", prefix);
        cJSON_AddStringToObject(j, key, strempty(m->resource_version));
        snprintf(key, sizeof key, "%suid", prefix);
        cJSON_AddStringToObject(j, key, strempty(m->uid));
}

static void add_details(cJSON *j, const K8sKind *kind, const void *obj) {
        if (kind == &k8s_kind_pod) {
                const K8sPod *p = obj;
                cJSON_AddStringToObject(j, "phase", strempty(p->phase));
                cJSON_AddNumberToObject(j, "volumes", (double) p->n_volumes);
        } else if (kind == &k8s_kind_node) {
                const K8sNode *n = obj;
                cJSON *a = cJSON_AddArrayToObject(j, "volumesInUse");
                for (size_t i = 0; n->volumes_in_use && n->volumes_in_use[i]; i++)
                        cJSON_AddItemToArray(a, cJSON_CreateString(n->volumes_in_use[i]));
        } else if (kind == &k8s_kind_volume_attachment) {
                const K8sVolumeAttachment *va = obj;
                cJSON_AddBoolToObject(j, "attached", va->attached);
        } else if (kind == &k8s_kind_secret) {
                const K8sSecret *s = obj;
                cJSON_AddNumberToObject(j, "keys", (double) s->n_data);
                /* Sizes only: a test tool need not print credentials. */
                cJSON *sizes = cJSON_AddObjectToObject(j, "sizes");
                for (size_t k = 0; k < s->n_data; k++)
                        cJSON_AddNumberToObject(sizes, s->data[k].key, (double) s->data[k].size);
        } else if (kind == &k8s_kind_configmap) {
                const K8sConfigMap *c = obj;
                cJSON *data = cJSON_AddObjectToObject(j, "data");
                for (size_t k = 0; k < c->data.n; k++)
                        cJSON_AddStringToObject(data, c->data.keys[k], c->data.values[k]);
                cJSON *sizes = cJSON_AddObjectToObject(j, "binarySizes");
                for (size_t k = 0; k < c->n_binary_data; k++)
                        cJSON_AddNumberToObject(sizes, c->binary_data[k].key, (double) c->binary_data[k].size);
                cJSON_AddBoolToObject(j, "immutable", c->immutable);
        } else if (kind == &k8s_kind_pvc) {
                const K8sPersistentVolumeClaim *c = obj;
                cJSON_AddStringToObject(j, "volumeName", strempty(c->volume_name));
        } else if (kind == &k8s_kind_pv) {
                const K8sPersistentVolume *v = obj;
                cJSON_AddStringToObject(j, "volumeHandle", v->csi ? v->csi->volume_handle : "");
        }
}

static void on_add(K8sInformer *i, const void *obj, void *userdata) {
        cJSON *j = base("add", i);
        add_meta(j, "", obj);
        add_details(j, k8s_informer_kind(i), obj);
        emit(j);
}

static void on_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        cJSON *j = base("update", i);
        add_meta(j, "", new);
        add_meta(j, "old_", old);
        add_details(j, k8s_informer_kind(i), new);
        emit(j);
}

static void on_delete(K8sInformer *i, const void *old, void *userdata) {
        cJSON *j = base("delete", i);
        add_meta(j, "", old);
        emit(j);
}

static void on_synced(K8sInformer *i, void *userdata) {
        cJSON *j = base("synced", i);
        cJSON_AddNumberToObject(j, "count", (double) k8s_informer_size(i));
        cJSON_AddStringToObject(j, "rv", strempty(k8s_informer_resource_version(i)));
        emit(j);
}

static void on_error(K8sInformer *i, int error, long status, const char *message, void *userdata) {
        cJSON *j = base("error", i);
        cJSON_AddNumberToObject(j, "error", error);
        cJSON_AddNumberToObject(j, "status", (double) status);
        cJSON_AddStringToObject(j, "message", strempty(message));
        emit(j);
}

static int pod_filter(const void *obj, const char **ret_field) {
        return k8s_pod_validate_names(obj, ret_field);
}

static const K8sInformerHandlers handlers = {
        .on_add = on_add,
        .on_update = on_update,
        .on_delete = on_delete,
        .on_synced = on_synced,
        .on_error = on_error,
};

static void on_write_done(K8sClient *c, int error, const char *message, void *userdata) {
        cJSON *j = base("done", NULL);
        cJSON_AddStringToObject(j, "cmd", userdata);
        cJSON_AddNumberToObject(j, "error", error);
        if (message)
                cJSON_AddStringToObject(j, "message", message);
        emit(j);
}

static void on_get_done(K8sClient *c, int error, long status, const char *message, void *obj, void *userdata) {
        const K8sKind *kind = userdata;
        cJSON *j = base("get", NULL);
        cJSON_AddStringToObject(j, "kind", kind->kind);
        cJSON_AddNumberToObject(j, "error", error);
        cJSON_AddNumberToObject(j, "status", (double) status);
        if (message)
                cJSON_AddStringToObject(j, "message", message);
        if (obj) {
                add_meta(j, "", obj);
                add_details(j, kind, obj);
                kind->free(obj);
        }
        emit(j);
}

static void command_failed(const char *cmd, int r) {
        cJSON *j = base("done", NULL);
        cJSON_AddStringToObject(j, "cmd", cmd);
        cJSON_AddNumberToObject(j, "error", r);
        cJSON_AddStringToObject(j, "message", "could not start");
        emit(j);
}

static const K8sKind *kind_by_name(const char *s) {
        static const struct {
                const char *name;
                const K8sKind *kind;
        } table[] = {
                { "pod", &k8s_kind_pod }, { "pvc", &k8s_kind_pvc }, { "pv", &k8s_kind_pv },
                { "secret", &k8s_kind_secret }, { "va", &k8s_kind_volume_attachment },
                { "configmap", &k8s_kind_configmap },
                { "node", &k8s_kind_node }, { "csidriver", &k8s_kind_csidriver },
        };
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq(table[i].name, s))
                        return table[i].kind;
        return NULL;
}

/* Frees the API objects while the loop still runs, so that libcurl's
 * clean-up can still touch its timer, then stops the loop. */
static void shutdown_harness(Harness *h) {
        for (size_t i = 0; i < ELEMENTSOF(h->va); i++)
                h->va[i] = k8s_informer_free(h->va[i]);
        for (size_t i = 0; i < ELEMENTSOF(h->informers); i++)
                h->informers[i] = k8s_informer_free(h->informers[i]);
        h->client = k8s_client_free(h->client);
        h->recorder = k8s_event_recorder_free(h->recorder);
        sd_event_exit(h->event, 0);
}

static void run_command(Harness *h, char *line) {
        char *argv[64];
        int argc = 0, r = 0;
        char *save = NULL, *rest = NULL;

        for (char *t = strtok_r(line, " \t", &save); t && argc < 63; t = strtok_r(NULL, " \t", &save)) {
                argv[argc++] = t;
                if (argc == 6 && streq(argv[0], "event")) {
                        rest = save; /* the message keeps its spaces */
                        break;
                }
        }
        argv[argc] = NULL;
        if (argc == 0)
                return;
        const char *cmd = argv[0];
        if (streq(cmd, "quit")) {
                shutdown_harness(h);
                return;
        }
        else if (streq(cmd, "volumes-in-use"))
                r = k8s_node_patch_volumes_in_use(h->client, h->node, argv + 1, on_write_done, "volumes-in-use");
        else if (streq(cmd, "node-id") && argc >= 2)
                r = k8s_node_set_driver_id(h->client, h->node, argv[1], argc >= 3 ? argv[2] : NULL, on_write_done,
                                           "node-id");
        else if (streq(cmd, "csinode") && argc >= 2) {
                char *keys[16] = {};
                size_t n = 0;
                if (argc >= 4)
                        for (char *s2 = NULL, *k = strtok_r(argv[3], ",", &s2); k && n < 15; k = strtok_r(NULL, ",", &s2))
                                keys[n++] = k;
                r = k8s_csinode_set_driver(h->client, h->node, argv[1], argc >= 3 ? argv[2] : NULL, keys,
                                           argc >= 5 ? atoll(argv[4]) : 0, on_write_done, "csinode");
        } else if (streq(cmd, "event") && argc >= 6) {
                K8sObjectRef ref = { .kind = "Pod", .api_version = "v1", .namespace = argv[1], .name = argv[2],
                                     .uid = argv[3] };
                r = k8s_event_record(h->recorder, &ref, argv[4], argv[5], strempty(rest), on_write_done, "event");
                if (r == 1) {
                        cJSON *j = base("done", NULL);
                        cJSON_AddStringToObject(j, "cmd", "event");
                        cJSON_AddBoolToObject(j, "dropped", true);
                        emit(j);
                        r = 0;
                }
        } else if (streq(cmd, "get") && argc >= 4) {
                const K8sKind *kind = kind_by_name(argv[1]);
                r = kind ? k8s_get_object(h->client, kind, streq(argv[2], "-") ? NULL : argv[2], argv[3],
                                          on_get_done, (void *) kind)
                         : -EINVAL;
        } else if (streq(cmd, "va-watch") && argc >= 2) {
                for (size_t i = 0; i < ELEMENTSOF(h->va); i++)
                        if (!h->va[i]) {
                                r = k8s_informer_new_volume_attachment(h->client, argv[1], &handlers, h, &h->va[i]);
                                if (r >= 0)
                                        r = k8s_informer_start(h->va[i]);
                                break;
                        }
        } else if (streq(cmd, "watch") && argc >= 4) {
                const K8sKind *kind = kind_by_name(argv[1]);
                const char *ns = streq(argv[2], "-") ? NULL : argv[2];
                r = -ENOSPC;
                for (size_t i = 0; kind && i < ELEMENTSOF(h->va); i++)
                        if (!h->va[i]) {
                                if (kind == &k8s_kind_configmap)
                                        r = k8s_informer_new_configmap(h->client, ns, argv[3], &handlers, h, &h->va[i]);
                                else if (kind == &k8s_kind_secret)
                                        r = k8s_informer_new_secret(h->client, ns, argv[3], &handlers, h, &h->va[i]);
                                else
                                        r = k8s_informer_new_by_name(h->client, kind, ns, argv[3], &handlers, h,
                                                                     &h->va[i]);
                                if (r >= 0)
                                        r = k8s_informer_start(h->va[i]);
                                break;
                        }
                if (!kind)
                        r = -EINVAL;
        } else if (streq(cmd, "va-stop") && argc >= 2) {
                for (size_t i = 0; i < ELEMENTSOF(h->va); i++) {
                        const void *o;
                        size_t cur = 0;
                        (void) o;
                        if (h->va[i]) {
                                /* One VA per informer: stop the one watching that name. */
                                o = k8s_informer_next(h->va[i], &cur);
                                h->va[i] = k8s_informer_free(h->va[i]);
                                break;
                        }
                }
        } else if (streq(cmd, "stats")) {
                for (size_t i = 0; i < ELEMENTSOF(h->informers); i++) {
                        K8sInformerStats st;
                        if (!h->informers[i])
                                continue;
                        k8s_informer_get_stats(h->informers[i], &st);
                        cJSON *j = base("stats", h->informers[i]);
                        cJSON_AddNumberToObject(j, "lists", st.lists);
                        cJSON_AddNumberToObject(j, "watches", st.watches);
                        cJSON_AddNumberToObject(j, "relistsGone", st.relists_gone);
                        cJSON_AddNumberToObject(j, "errors", st.errors);
                        cJSON_AddNumberToObject(j, "skipped", st.skipped);
                        cJSON_AddNumberToObject(j, "size", (double) k8s_informer_size(h->informers[i]));
                        emit(j);
                }
        } else
                r = -EINVAL;
        if (r < 0)
                command_failed(cmd, r);
}

static int on_stdin(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Harness *h = userdata;
        ssize_t n = read(fd, h->line + h->line_len, sizeof h->line - 1 - h->line_len);

        if (n <= 0) {
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                shutdown_harness(h);
                return 0;
        }
        h->line_len += (size_t) n;
        for (;;) {
                char *nl = memchr(h->line, '\n', h->line_len);
                if (!nl) {
                        if (h->line_len == sizeof h->line - 1)
                                h->line_len = 0; /* too long: drop */
                        break;
                }
                *nl = '\0';
                run_command(h, h->line);
                size_t used = (size_t) (nl - h->line) + 1;
                memmove(h->line, nl + 1, h->line_len - used);
                h->line_len -= used;
        }
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        shutdown_harness(userdata);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "kubeconfig", required_argument, NULL, 'k' },
                { "server", required_argument, NULL, 's' },
                { "token-file", required_argument, NULL, 't' },
                { "ca", required_argument, NULL, 'c' },
                { "client-cert", required_argument, NULL, 'C' },
                { "client-key", required_argument, NULL, 'K' },
                { "sa-dir", required_argument, NULL, 'a' },
                { "node", required_argument, NULL, 'n' },
                { "informers", required_argument, NULL, 'i' },
                { "qps", required_argument, NULL, 'q' },
                { "burst", required_argument, NULL, 'b' },
                { "min-watch-timeout", required_argument, NULL, 'w' },
                {},
        };
        K8sAuthSettings settings = {};
        K8sClientOptions copts = {};
        const char *informers = "pods,csidrivers,node";
        uint64_t min_watch = 0;
        Harness h = {};
        K8sAuth *auth = NULL;
        _cleanup_free_ char *error = NULL;
        sigset_t mask;
        int c, r;

        log_setup();
        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 'k': settings.kubeconfig = optarg; break;
                case 's': settings.server = optarg; break;
                case 't': settings.token_file = optarg; break;
                case 'c': settings.certificate_authority = optarg; break;
                case 'C': settings.client_certificate = optarg; break;
                case 'K': settings.client_key = optarg; break;
                case 'a': settings.service_account_dir = optarg; break;
                case 'n': h.node = optarg; break;
                case 'i': informers = optarg; break;
                case 'q': copts.qps = atof(optarg); break;
                case 'b': copts.burst = (unsigned) atoi(optarg); break;
                case 'w': min_watch = (uint64_t) (atof(optarg) * 1e6); break;
                default: return 1;
                }
        if (!h.node) {
                fprintf(stderr, "--node is required\n");
                return 1;
        }

        r = k8s_auth_resolve(&settings, &auth, &error);
        if (r < 0) {
                cJSON *j = base("fatal", NULL);
                cJSON_AddStringToObject(j, "message", error ? error : strerror(-r));
                emit(j);
                return 2;
        }
        if (curl_loop_global_init() < 0 || sd_event_default(&h.event) < 0)
                return 2;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        (void) sd_event_add_signal(h.event, NULL, SIGTERM, on_signal, &h);
        (void) sd_event_add_signal(h.event, NULL, SIGINT, on_signal, &h);

        r = k8s_client_new(h.event, auth, &copts, &h.client);
        if (r < 0) {
                cJSON *j = base("fatal", NULL);
                cJSON_AddStringToObject(j, "message", "cannot create the API client");
                emit(j);
                return 2;
        }
        r = k8s_event_recorder_new(h.client, "kvolumed", h.node, &h.recorder);
        if (r < 0)
                return 2;

        size_t n = 0;
        K8sInformerOptions io = { .min_watch_timeout_usec = min_watch };
        if (strstr(informers, "pods")) {
                _cleanup_free_ char *sel = NULL;
                if (asprintf(&sel, "spec.nodeName=%s", h.node) < 0)
                        return 2;
                io.field_selector = sel;
                io.filter = pod_filter;
                r = k8s_informer_new(h.client, &k8s_kind_pod, &io, &handlers, &h, &h.informers[n++]);
                if (r < 0)
                        return 2;
        }
        if (strstr(informers, "csidrivers")) {
                io.field_selector = NULL;
                io.filter = NULL;
                r = k8s_informer_new(h.client, &k8s_kind_csidriver, &io, &handlers, &h, &h.informers[n++]);
                if (r < 0)
                        return 2;
        }
        if (strstr(informers, "node")) {
                _cleanup_free_ char *sel = NULL;
                if (asprintf(&sel, "metadata.name=%s", h.node) < 0)
                        return 2;
                io.field_selector = sel;
                r = k8s_informer_new(h.client, &k8s_kind_node, &io, &handlers, &h, &h.informers[n++]);
                if (r < 0)
                        return 2;
        }
        for (size_t i = 0; i < n; i++)
                (void) k8s_informer_start(h.informers[i]);

        sd_event_source *in = NULL;
        (void) sd_event_add_io(h.event, &in, STDIN_FILENO, EPOLLIN, on_stdin, &h);
        (void) sd_event_source_set_floating(in, true);
        sd_event_source_unref(in);
        emit(base("started", NULL));
        r = sd_event_loop(h.event);

        if (h.client)
                shutdown_harness(&h);
        sd_event_unref(h.event);
        curl_global_cleanup();
        return r < 0 ? 2 : 0;
}
