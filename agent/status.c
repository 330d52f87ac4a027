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

/* /volumes: a row per publish, per volume without one, per volume waiting. */
static int rows_from_volumes(const cJSON *doc, Row **rows, size_t *n) {
        const cJSON *v, *p;
        Row *r;

        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(doc, "volumes")) {
                const cJSON *err = cJSON_GetObjectItemCaseSensitive(v, "last_error");
                const char *error = str(err, "message");
                bool wanted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "wanted"));
                const cJSON *pubs = cJSON_GetObjectItemCaseSensitive(v, "publishes");

                cJSON_ArrayForEach(p, pubs) {
                        bool done = streq_ptr(str(p, "state"), "done");
                        if (!(r = add_row(rows, n)))
                                return -ENOMEM;
                        r->pod = str(p, "pod");
                        r->volume = str(p, "volume");
                        r->driver = str(v, "driver");
                        r->path = str(p, "path");
                        r->state = !done ? "uncertain" : wanted ? "published" : "tearing-down";
                        r->reason = str(p, "teardown_waits") ?: (!done || !wanted ? error : NULL);
                }
                if (cJSON_GetArraySize(pubs) > 0)
                        continue;
                /* Staged (or on its way) with no pod's publish. */
                if (!(r = add_row(rows, n)))
                        return -ENOMEM;
                r->volume = str(v, "name");
                r->driver = str(v, "driver");
                r->path = str(cJSON_GetObjectItemCaseSensitive(v, "stage"), "path");
                r->state = !wanted                          ? "tearing-down"
                           : str(v, "driver_waiting_since") ? "waiting"
                           : cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
                                     cJSON_GetObjectItemCaseSensitive(v, "attach"), "attached"))
                                   ? "waiting"
                                   : "pending";
                r->reason = error
                                    ?: str(v, "driver_waiting_since")
                                       ? "waiting for its CSI driver to register"
                               : streq(r->state, "waiting") ? "waiting for its attachment"
                                                            : NULL;
        }
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "pending")) {
                if (!(r = add_row(rows, n)))
                        return -ENOMEM;
                r->pod = str(p, "pod");
                r->volume = str(p, "volume");
                r->state = streq_ptr(str(p, "state"), "failed") ? "failed" : "waiting";
                r->reason = str(p, "message");
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
        printf("Usage: kvolumed status [--socket PATH | --config PATH] [NAMESPACE/NAME | UID]\n"
               "\n"
               "Prints the node's volumes (or one pod's) as a table, from the local volumes API\n"
               "of the kvolumed that runs.\n"
               "\n"
               "  -s --socket PATH   the API socket (default: [api] socket of the configuration,\n"
               "                     else " DEFAULT_SOCKET ")\n"
               "  -c --config PATH   the configuration to read [api] socket from\n"
               "                     (default: " CONFIG_DEFAULT_PATH ", when it exists)\n");
}

int status_main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "config", required_argument, NULL, 'c' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL, *url = NULL, *escaped = NULL;
        const char *socket_path = NULL, *config_path = NULL, *pod = NULL;
        _cleanup_free_ Row *rows = NULL;
        cJSON *doc = NULL;
        size_t n = 0;
        long status;
        int c, r;

        optind = 1;
        while ((c = getopt_long(argc, argv, "s:c:h", options, NULL)) >= 0)
                switch (c) {
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
        if (r < 0)
                fprintf(stderr, "kvolumed status: out of memory\n");
        else if (n == 0)
                printf(pod ? "No CSI volume of pod %s on node %s.\n" : "No CSI volume on node %s%s.\n",
                       pod ? pod : "", str(doc, "node") ?: "(this node)");
        else
                print_rows(rows, n);
        cJSON_Delete(doc);
        curl_global_cleanup();
        return r < 0 ? 1 : 0;
}
