/* SPDX-License-Identifier: Apache-2.0 */
/* k8s/ benchmark (run by test/bench/k8s.sh):
 *   k8s-bench decode FIXTURE N
 *       parse + decode the Pod fixture N times: µs per object
 *   k8s-bench informer --server URL --token-file F --ca F --control URL --node NODE --changes N
 *       list+watch the node's pods: heap bytes per stored pod, then N pod
 *       changes made through the fake's control port, each timed from the
 *       moment the change is sent until the informer's update handler runs. */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "k8s/client.h"
#include "k8s/informer.h"
#include "k8s/objects.h"
#include "systemd/curl-loop.h"
#include "systemd/log.h"

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static int bench_decode(const char *path, unsigned n) {
        FILE *f = fopen(path, "re");
        char *buf;
        long size;
        uint64_t t0, t_parse = 0, t_decode = 0;

        if (!f)
                return 1;
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc((size_t) size);
        if (!buf || fread(buf, 1, (size_t) size, f) != (size_t) size)
                return 1;
        fclose(f);
        for (unsigned i = 0; i < n; i++) {
                K8sPod *p = NULL;
                K8sDecodeError err;
                t0 = now_ns();
                cJSON *j = cJSON_ParseWithLength(buf, (size_t) size);
                uint64_t t1 = now_ns();
                if (k8s_pod_from_json(j, &p, &err) < 0)
                        return 1;
                t_parse += t1 - t0;
                t_decode += now_ns() - t1;
                k8s_pod_free(p);
                cJSON_Delete(j);
        }
        printf("decode: Pod fixture (%ld bytes) x %u: parse %.1f us + decode %.1f us = %.1f us per object\n", size, n,
               (double) t_parse / n / 1e3, (double) t_decode / n / 1e3, (double) (t_parse + t_decode) / n / 1e3);
        free(buf);
        return 0;
}

typedef struct Bench {
        sd_event *event;
        K8sClient *client;
        K8sInformer *informer;
        CurlLoop *control_loop;
        const char *control;
        const char *node;
        unsigned changes, done_changes, pods;
        uint64_t sent_ns;
        char target[64];
        uint64_t *latencies;
        size_t heap_before;
        sd_event_source *next_timer;
} Bench;

static size_t heap_used(void) {
        struct mallinfo2 mi = mallinfo2();
        return mi.uordblks + mi.hblkhd;
}

static void send_change(Bench *b);

static int on_next_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        send_change(userdata);
        return 0;
}

static uint64_t put_total_ns;
static unsigned put_count;

static void on_put_done(CurlLoop *loop, CURL *easy, CURLcode result, void *userdata) {
        Bench *b = userdata;
        long status = 0;
        if (b->sent_ns) {
                put_total_ns += now_ns() - b->sent_ns;
                put_count++;
        }
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        if (result != CURLE_OK || status != 200)
                fprintf(stderr, "control PUT failed: %s %ld\n", curl_easy_strerror(result), status);
        struct curl_slist *h = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &h);
        curl_easy_cleanup(easy);
}

static size_t discard(char *d, size_t s, size_t n, void *u) {
        return s * n;
}

static void send_change(Bench *b) {
        char url[512], body[2048];
        unsigned k = b->done_changes;
        CURL *e = curl_easy_init();
        static struct curl_slist *headers;

        if (!headers)
                headers = curl_slist_append(curl_slist_append(NULL, "Content-Type: application/json"), "Expect:");
        snprintf(b->target, sizeof b->target, "p%05u", (k * 37) % b->pods);
        snprintf(url, sizeof url, "%s/objects", b->control);
        snprintf(body, sizeof body,
                 "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"bench\","
                 "\"labels\":{\"app\":\"bench\",\"change\":\"c%u\"}},"
                 "\"spec\":{\"nodeName\":\"%s\",\"serviceAccountName\":\"default\","
                 "\"securityContext\":{\"fsGroup\":2000},"
                 "\"containers\":[{\"name\":\"app\",\"image\":\"registry.example/app:1\","
                 "\"volumeMounts\":[{\"name\":\"data\",\"mountPath\":\"/data\"},{\"name\":\"cfg\",\"mountPath\":\"/cfg\",\"readOnly\":true}]}],"
                 "\"volumes\":[{\"name\":\"data\",\"persistentVolumeClaim\":{\"claimName\":\"data-%s\"}},"
                 "{\"name\":\"cfg\",\"csi\":{\"driver\":\"hostpath.csi.k8s.io\",\"volumeAttributes\":{\"size\":\"1Mi\"}}}]},"
                 "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"app\",\"ready\":true,"
                 "\"restartCount\":0,\"image\":\"registry.example/app:1\",\"imageID\":\"\","
                 "\"state\":{\"running\":{\"startedAt\":\"2024-01-01T00:00:00Z\"}}}]}}",
                 b->target, k, b->node, b->target);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        /* A fresh connection per change: the fake writes headers and body in
         * two send()s without TCP_NODELAY, so on a kept-alive connection Nagle
         * and delayed ACKs add ~40-250 ms that are not the informer's. */
        curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
        b->sent_ns = now_ns();
        curl_loop_add(b->control_loop, e, on_put_done, b);
}

static void on_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        Bench *b = userdata;
        const K8sPod *p = new;

        if (!streq(p->meta.name, b->target) || b->sent_ns == 0)
                return;
        b->latencies[b->done_changes++] = now_ns() - b->sent_ns;
        b->sent_ns = 0;
        b->target[0] = '\0';
        if (b->done_changes == b->changes) {
                sd_event_exit(b->event, 0);
                return;
        }
        /* A short pause so the fake is idle again before the next change. */
        uint64_t t;
        sd_event_now(b->event, CLOCK_MONOTONIC, &t);
        sd_event_source_set_time(b->next_timer, t + 5 * USEC_PER_MSEC);
        sd_event_source_set_enabled(b->next_timer, SD_EVENT_ONESHOT);
}

static uint64_t synced_ns;

static void on_synced(K8sInformer *i, void *userdata) {
        Bench *b = userdata;
        size_t heap = heap_used();
        b->pods = (unsigned) k8s_informer_size(i);
        printf("informer: %u pods listed and stored in %.0f ms; heap %.0f bytes per stored pod\n", b->pods,
               (double) (now_ns() - synced_ns) / 1e6, (double) (heap - b->heap_before) / b->pods);
        send_change(b);
}

static int bench_informer(int argc, char **argv) {
        static const struct option options[] = {
                { "server", required_argument, NULL, 's' }, { "token-file", required_argument, NULL, 't' },
                { "ca", required_argument, NULL, 'c' },     { "control", required_argument, NULL, 'C' },
                { "node", required_argument, NULL, 'n' },   { "changes", required_argument, NULL, 'N' },
                {},
        };
        K8sAuthSettings s = {};
        Bench b = { .changes = 200 };
        K8sAuth *auth;
        char *err = NULL, *sel = NULL;
        int c;

        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 's': s.server = optarg; break;
                case 't': s.token_file = optarg; break;
                case 'c': s.certificate_authority = optarg; break;
                case 'C': b.control = optarg; break;
                case 'n': b.node = optarg; break;
                case 'N': b.changes = (unsigned) atoi(optarg); break;
                default: return 1;
                }
        if (k8s_auth_resolve(&s, &auth, &err) < 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
        }
        b.latencies = calloc(b.changes, sizeof(uint64_t));
        curl_loop_global_init();
        sd_event_default(&b.event);
        curl_loop_new(b.event, &b.control_loop);
        sd_event_add_time(b.event, &b.next_timer, CLOCK_MONOTONIC, 0, 0, on_next_timer, &b);
        sd_event_source_set_enabled(b.next_timer, SD_EVENT_OFF);
        if (k8s_client_new(b.event, auth, NULL, &b.client) < 0)
                return 1;
        if (asprintf(&sel, "spec.nodeName=%s", b.node) < 0)
                return 1;
        b.heap_before = heap_used();
        synced_ns = now_ns();
        K8sInformerHandlers h = { .on_update = on_update, .on_synced = on_synced };
        if (k8s_informer_new(b.client, &k8s_kind_pod, &(K8sInformerOptions) { .field_selector = sel }, &h, &b,
                             &b.informer) < 0)
                return 1;
        k8s_informer_start(b.informer);
        sd_event_loop(b.event);

        qsort(b.latencies, b.done_changes, sizeof(uint64_t), cmp_u64);
        if (b.done_changes > 0)
                printf("watch latency over %u changes (change sent to the fake -> update handler): "
                       "median %.2f ms, p99 %.2f ms, max %.2f ms\n",
                       b.done_changes, (double) b.latencies[b.done_changes / 2] / 1e6,
                       (double) b.latencies[(b.done_changes * 99) / 100 - (b.done_changes >= 100 ? 1 : 0)] / 1e6,
                       (double) b.latencies[b.done_changes - 1] / 1e6);
        if (put_count)
                printf("(control-port PUT round trip, mean: %.2f ms)\n", (double) put_total_ns / put_count / 1e6);
        k8s_informer_free(b.informer);
        k8s_client_free(b.client);
        return 0;
}

int main(int argc, char **argv) {
        log_set_max_level(LOG_WARNING);
        if (argc >= 4 && streq(argv[1], "decode"))
                return bench_decode(argv[2], (unsigned) atoi(argv[3]));
        if (argc >= 2 && streq(argv[1], "informer"))
                return bench_informer(argc - 1, argv + 1);
        fprintf(stderr, "usage: k8s-bench decode FIXTURE N | informer --server ... (see k8s.sh)\n");
        return 1;
}
