/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "agent/status.h"
#include "conf/config.h"
#include "systemd/macro.h"
#include "systemd/validate.h"

#define DEFAULT_SOCKET "/run/kvolumed/kvolumed.sock"

typedef struct Buffer {
        char *data;
        size_t size;
} Buffer;

static size_t on_data(char *ptr, size_t size, size_t n, void *userdata) {
        Buffer *b = userdata;
        char *p = realloc(b->data, b->size + size * n + 1);
        if (!p)
                return 0;
        memcpy(p + b->size, ptr, size * n);
        b->size += size * n;
        p[b->size] = '\0';
        b->data = p;
        return size * n;
}

/* One GET on the socket: the HTTP status, or -1 when nobody answers. */
static long get(const char *socket_path, const char *url, cJSON **ret) {
        Buffer b = {};
        long status = -1;
        CURL *c = curl_easy_init();
        CURLcode rc;

        if (!c)
                return -1;
        (void) curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, socket_path);
        (void) curl_easy_setopt(c, CURLOPT_URL, url);
        (void) curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        (void) curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        (void) curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
        (void) curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        rc = curl_easy_perform(c);
        if (rc == CURLE_OK)
                (void) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        *ret = b.data ? cJSON_Parse(b.data) : NULL;
        free(b.data);
        return status;
}

static const char *str(const cJSON *o, const char *key) {
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
        return s && *s ? s : NULL;
}

typedef struct Row {
        const char *pod, *volume, *driver, *state, *path, *reason;
        char *owned; /* reason, when made here */
} Row;

static void print_rows(const Row *rows, size_t n) {
        static const char *const head[] = { "POD", "VOLUME", "DRIVER", "STATE", "HOST PATH", "REASON" };
        int w[5];

        for (size_t k = 0; k < 5; k++)
                w[k] = (int) strlen(head[k]);
        for (size_t i = 0; i < n; i++) {
                const char *cols[5] = { rows[i].pod, rows[i].volume, rows[i].driver, rows[i].state,
                                        rows[i].path };
                for (size_t k = 0; k < 5; k++)
                        w[k] = MAX(w[k], (int) strlen(cols[k] ?: "-"));
        }
        printf("%-*s  %-*s  %-*s  %-*s  %-*s  %s\n", w[0], head[0], w[1], head[1], w[2], head[2], w[3],
               head[3], w[4], head[4], head[5]);
        for (size_t i = 0; i < n; i++)
                printf("%-*s  %-*s  %-*s  %-*s  %-*s  %s\n", w[0], rows[i].pod ?: "-", w[1],
                       rows[i].volume ?: "-", w[2], rows[i].driver ?: "-", w[3], rows[i].state ?: "-", w[4],
                       rows[i].path ?: "-", rows[i].reason ?: "");
}

static Row *add_row(Row **rows, size_t *n) {
        Row *r = reallocarray(*rows, *n + 1, sizeof *r);
        if (!r)
                return NULL;
        *rows = r;
        r[*n] = (Row){};
        return &r[(*n)++];
}

/* By pod and volume; the volumes of no pod last. */
static int cmp_rows(const void *a, const void *b) {
        const Row *x = a, *y = b;
        int c;

        if (!x->pod != !y->pod)
                return x->pod ? -1 : 1;
        c = strcmp(strempty(x->pod), strempty(y->pod));
        return c != 0 ? c : strcmp(strempty(x->volume), strempty(y->volume));
}

static bool named_by(const cJSON *pod_volumes, const char *unique_name) {
        const cJSON *p;

        cJSON_ArrayForEach(p, pod_volumes) if (streq_ptr(str(p, "unique_name"), unique_name)) return true;
        return false;
}

/* /volumes: a row per pod volume (pod_volumes: what kvolumed_volumes counts,
 * in its states), then one per volume no pod volume names (staged for no
 * pod, or left to tear down).  A failed one says whose it is to fix. */
static int rows_from_volumes(const cJSON *doc, Row **rows, size_t *n) {
        const cJSON *pod_volumes = cJSON_GetObjectItemCaseSensitive(doc, "pod_volumes"), *v;
        Row *r;

        cJSON_ArrayForEach(v, pod_volumes) {
                const char *reason = str(v, "reason"), *message = str(v, "message");
                if (!(r = add_row(rows, n)))
                        return -ENOMEM;
                r->pod = str(v, "pod");
                r->volume = str(v, "volume");
                r->driver = str(v, "driver");
                r->state = str(v, "state");
                r->path = str(v, "path");
                r->reason = message;
                if (reason && message) {
                        if (asprintf(&r->owned, "%s: %s", reason, message) < 0) {
                                r->owned = NULL;
                                return -ENOMEM;
                        }
                        r->reason = r->owned;
                }
        }
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(doc, "volumes")) {
                const cJSON *err = cJSON_GetObjectItemCaseSensitive(v, "last_error");
                bool wanted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "wanted"));

                if (named_by(pod_volumes, str(v, "unique_name")) ||
                    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(v, "publishes")) > 0)
                        continue;
                if (!(r = add_row(rows, n)))
                        return -ENOMEM;
                r->volume = str(v, "name");
                r->driver = str(v, "driver");
                r->path = str(cJSON_GetObjectItemCaseSensitive(v, "stage"), "path");
                r->state = wanted ? "pending" : "tearing-down";
                r->reason = str(err, "message") ?: str(v, "driver_waiting_since")
                                                           ? "waiting for its CSI driver to register"
                                                   : wanted ? NULL
                                                            : "no pod wants it: to be unstaged";
        }
        return 0;
}

/* /v1/pods/{uid}/volumes: a row per volume of the pod. */
static int rows_from_pod(const cJSON *doc, Row **rows, size_t *n) {
        const cJSON *v;

        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(doc, "volumes")) {
                Row *r = add_row(rows, n);
                if (!r)
                        return -ENOMEM;
                r->pod = str(doc, "pod");
                r->volume = str(v, "name");
                r->driver = str(v, "driver");
                r->state = str(v, "state");
                r->path = str(v, "hostPath");
                r->reason = str(v, "reason");
        }
        return 0;
}

static void help(void) {
        printf("Usage: kvolumed status [--socket PATH | --config PATH] [--json] [NAMESPACE/NAME | UID]\n"
               "\n"
               "Prints the node's pod volumes (or one pod's) as a table, from the local volumes API\n"
               "of the kvolumed that runs: published, pending, failed or tearing-down, as the\n"
               "metric kvolumed_volumes and STATUS= count them. Exit 1 for a pod kvolumed does\n"
               "not know.\n"
               "\n"
               "  -j --json          print the API's answer (JSON) instead of the table\n"
               "  -s --socket PATH   the API socket (default: [api] socket of the configuration,\n"
               "                     else " DEFAULT_SOCKET ")\n"
               "  -c --config PATH   the configuration to read [api] socket from\n"
               "                     (default: " CONFIG_DEFAULT_PATH ", when it exists)\n");
}

int status_main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "config", required_argument, NULL, 'c' },
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL, *url = NULL, *escaped = NULL;
        const char *socket_path = NULL, *config_path = NULL, *pod = NULL;
        _cleanup_free_ Row *rows = NULL;
        cJSON *doc = NULL;
        size_t n = 0;
        bool json = false, known;
        long status;
        int c, r;

        optind = 1;
        while ((c = getopt_long(argc, argv, "s:c:jh", options, NULL)) >= 0)
                switch (c) {
                case 'j':
                        json = true;
                        break;
                case 's':
                        socket_path = optarg;
                        break;
                case 'c':
                        config_path = optarg;
                        break;
                case 'h':
                        help();
                        return 0;
                default:
                        fprintf(stderr, "Try 'kvolumed status --help'.\n");
                        return 1;
                }
        if (optind < argc)
                pod = argv[optind++];
        if (optind < argc) {
                fprintf(stderr, "kvolumed status: unexpected argument \"%s\"\n", argv[optind]);
                return 1;
        }
        if (!socket_path && (config_path || access(CONFIG_DEFAULT_PATH, F_OK) == 0)) {
                r = config_load(config_path ?: CONFIG_DEFAULT_PATH, &config, &error);
                if (r < 0) {
                        fprintf(stderr, "%s\n", error ?: strerror(-r));
                        return 1;
                }
                if (!config->api_socket) {
                        fprintf(stderr, "kvolumed status: the local volumes API is off ([api] socket is empty in "
                                "%s)\n", config->path ?: config_path ?: CONFIG_DEFAULT_PATH);
                        return 1;
                }
                socket_path = config->api_socket;
        }
        socket_path = socket_path ?: DEFAULT_SOCKET;

        if (pod && validate_uid(pod) >= 0)
                r = asprintf(&url, "http://localhost/v1/pods/%s/volumes", pod);
        else if (pod) {
                if (!strchr(pod, '/')) {
                        fprintf(stderr, "kvolumed status: \"%s\" is neither NAMESPACE/NAME nor a pod UID\n",
                                pod);
                        return 1;
                }
                escaped = curl_easy_escape(NULL, pod, 0);
                r = escaped ? asprintf(&url, "http://localhost/volumes?pod=%s", escaped) : -1;
        } else
                r = asprintf(&url, "http://localhost/volumes");
        if (r < 0) {
                url = NULL;
                fprintf(stderr, "kvolumed status: out of memory\n");
                return 1;
        }
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "kvolumed status: cannot initialise libcurl\n");
                return 1;
        }
        /* A socket there that this user may not use is not "not running". */
        if (access(socket_path, F_OK) == 0 && access(socket_path, W_OK) < 0) {
                fprintf(stderr,
                        "kvolumed status: %s: %m (the socket is root's, or [api] group's members')\n",
                        socket_path);
                curl_global_cleanup();
                return 1;
        }
        status = get(socket_path, url, &doc);
        if (status < 0) {
                fprintf(stderr,
                        "kvolumed status: kvolumed is not running: nothing answers on %s (is "
                        "kvolumed.service active? is [api] socket set?)\n",
                        socket_path);
                cJSON_Delete(doc);
                curl_global_cleanup();
                return 1;
        }
        if (status != 200 || !doc) {
                const char *why = doc ? str(doc, "error") : NULL;
                fprintf(stderr, "kvolumed status: %s (HTTP %ld from %s)\n", why ?: "unexpected answer",
                        status, socket_path);
                cJSON_Delete(doc);
                curl_global_cleanup();
                return 1;
        }
        r = pod && validate_uid(pod) >= 0 ? rows_from_pod(doc, &rows, &n)
                                          : rows_from_volumes(doc, &rows, &n);
        /* A pod by name is known when the node has anything of it: a volume
         * it wants (failed before any publish, too) or one it had. */
        known = !pod || validate_uid(pod) >= 0 || n > 0 ||
                cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "pending")) > 0;
        if (r < 0)
                fprintf(stderr, "kvolumed status: out of memory\n");
        else if (json) {
                char *text = cJSON_Print(doc);
                if (text)
                        printf("%s\n", text);
                else
                        r = -ENOMEM;
                free(text);
        } else if (n > 0) {
                qsort(rows, n, sizeof *rows, cmp_rows);
                print_rows(rows, n);
        }
        else if (!pod)
                printf("No pod volume on node %s.\n", str(doc, "node") ?: "(this node)");
        if (r >= 0 && !known)
                fprintf(stderr,
                        "kvolumed status: no pod %s with volumes on node %s: it is not bound to this node, "
                        "or it has no volumes (kubectl get pod -n %.*s %s -o wide)\n",
                        pod, str(doc, "node") ?: "(this node)", (int) (strchr(pod, '/') - pod), pod,
                        strchr(pod, '/') + 1);
        for (size_t i = 0; i < n; i++)
                free(rows[i].owned);
        cJSON_Delete(doc);
        curl_global_cleanup();
        return r < 0 || !known ? 1 : 0;
}
