/* SPDX-License-Identifier: Apache-2.0 */
/* Event aggregation and spam filter, the token bucket and backoff on a fake
 * clock, and the pure edits behind the node annotation and CSINode writers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/backoff.h"
#include "k8s/events.h"
#include "k8s/json.h"
#include "k8s/ratelimit.h"

#define T0 (UINT64_C(1700000000) * USEC_PER_SEC)

static const K8sObjectRef pod_a = { .kind = "Pod", .api_version = "v1", .namespace = "default", .name = "a",
                                    .uid = "u-a" };
static const K8sObjectRef pod_b = { .kind = "Pod", .api_version = "v1", .namespace = "default", .name = "b",
                                    .uid = "u-b" };

static void test_aggregation(void **state) {
        _cleanup_(k8s_event_cache_freep) K8sEventCache *c = NULL;
        K8sEventDecision d;
        char first_name[300];

        assert_int_equal(k8s_event_cache_new(&c), 0);
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMount", "boom", T0, &d),
                         K8S_EVENT_CREATE);
        assert_int_equal(d.count, 1);
        assert_int_equal(d.first_usec, T0);
        assert_true(strncmp(d.name, "a.", 2) == 0);
        snprintf(first_name, sizeof first_name, "%s", d.name);

        /* Same event 9 minutes later: PATCH of the same Event. */
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMount", "boom", T0 + 9 * USEC_PER_MINUTE,
                                                &d),
                         K8S_EVENT_PATCH);
        assert_string_equal(d.name, first_name);
        assert_int_equal(d.count, 2);
        assert_int_equal(d.first_usec, T0);

        /* Another message, reason, type or object: a new Event. */
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMount", "other", T0 + 1, &d),
                         K8S_EVENT_CREATE);
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMapVolume", "boom", T0 + 2, &d),
                         K8S_EVENT_CREATE);
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Normal", "FailedMount", "boom", T0 + 3, &d),
                         K8S_EVENT_CREATE);
        assert_int_equal(k8s_event_cache_decide(c, &pod_b, "Warning", "FailedMount", "boom", T0 + 4, &d),
                         K8S_EVENT_CREATE);

        /* More than 10 minutes after the last repeat: a new Event, count 1. */
        uint64_t later = T0 + 9 * USEC_PER_MINUTE + K8S_EVENT_AGGREGATE_WINDOW + 1;
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMount", "boom", later, &d),
                         K8S_EVENT_CREATE);
        assert_int_equal(d.count, 1);
        assert_string_not_equal(d.name, first_name);

        /* A repeat whose Event vanished (PATCH 404) creates again. */
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMount", "boom", later + 1, &d),
                         K8S_EVENT_PATCH);
        k8s_event_cache_forget(c, d.name);
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "FailedMount", "boom", later + 2, &d),
                         K8S_EVENT_CREATE);
}

static void test_spam_filter(void **state) {
        _cleanup_(k8s_event_cache_freep) K8sEventCache *c = NULL;
        K8sEventDecision d;
        char msg[32];
        uint64_t t = T0;

        assert_int_equal(k8s_event_cache_new(&c), 0);
        for (int i = 0; i < 25; i++) {
                snprintf(msg, sizeof msg, "m%d", i);
                assert_int_not_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "R", msg, t, &d), K8S_EVENT_DROP);
        }
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "R", "m-extra", t, &d), K8S_EVENT_DROP);
        /* Repeats count against the same bucket. */
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "R", "m0", t, &d), K8S_EVENT_DROP);
        /* Other objects have their own bucket. */
        assert_int_equal(k8s_event_cache_decide(c, &pod_b, "Warning", "R", "m0", t, &d), K8S_EVENT_CREATE);
        /* One token every 5 minutes. */
        t += K8S_EVENT_SPAM_REFILL - USEC_PER_SEC;
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "R", "m-late", t, &d), K8S_EVENT_DROP);
        t += USEC_PER_SEC;
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "R", "m-late", t, &d), K8S_EVENT_CREATE);
        assert_int_equal(k8s_event_cache_decide(c, &pod_a, "Warning", "R", "m-late", t, &d), K8S_EVENT_DROP);
        /* After a long quiet time the burst is back, but never above 25. */
        t += 1000 * K8S_EVENT_SPAM_REFILL;
        int allowed = 0;
        for (int i = 0; i < 40; i++) {
                snprintf(msg, sizeof msg, "n%d", i);
                if (k8s_event_cache_decide(c, &pod_a, "Warning", "R", msg, t, &d) != K8S_EVENT_DROP)
                        allowed++;
        }
        assert_int_equal(allowed, 25);
}

static void test_token_bucket(void **state) {
        K8sTokenBucket b;
        uint64_t t = 1000;
        int n = 0;

        k8s_token_bucket_init(&b, 50, 100, t);
        while (k8s_token_bucket_take(&b, t))
                n++;
        assert_int_equal(n, 100);
        assert_int_equal(k8s_token_bucket_wait_usec(&b, t), 20000);
        assert_false(k8s_token_bucket_take(&b, t + 19999));
        assert_true(k8s_token_bucket_take(&b, t + 20000 + 1));
        /* One second later: 50 more. */
        n = 0;
        t += 20001 + USEC_PER_SEC;
        while (k8s_token_bucket_take(&b, t))
                n++;
        assert_int_equal(n, 50);
}

static void test_backoff(void **state) {
        K8sBackoff b = K8S_BACKOFF_REFLECTOR;

        assert_int_equal(k8s_backoff_next(&b, 0.0), 800 * USEC_PER_MSEC);
        assert_int_equal(k8s_backoff_next(&b, 0.0), 1600 * USEC_PER_MSEC);
        assert_int_equal(k8s_backoff_next(&b, 0.5), 3200 * USEC_PER_MSEC * 3 / 2);
        for (int i = 0; i < 20; i++)
                (void) k8s_backoff_next(&b, 0.0);
        assert_int_equal(k8s_backoff_next(&b, 0.0), 30 * USEC_PER_SEC);
        assert_true(k8s_backoff_next(&b, 0.9999) < 60 * USEC_PER_SEC);
        k8s_backoff_reset(&b);
        assert_int_equal(k8s_backoff_next(&b, 0.0), 800 * USEC_PER_MSEC);
        for (int i = 0; i < 1000; i++) {
                double r = k8s_random01();
                assert_true(r >= 0.0 && r < 1.0);
        }
}

static void test_node_id_annotation(void **state) {
        char *v = NULL;

        assert_int_equal(k8s_node_id_annotation_update(NULL, "d1", "n1", &v), 1);
        assert_string_equal(v, "{\"d1\":\"n1\"}");
        free(v);
        assert_int_equal(k8s_node_id_annotation_update("{\"d1\":\"n1\"}", "d1", "n1", &v), 0);
        free(v);
        assert_int_equal(k8s_node_id_annotation_update("{\"d1\":\"n1\"}", "d2", "n2", &v), 1);
        assert_string_equal(v, "{\"d1\":\"n1\",\"d2\":\"n2\"}");
        free(v);
        assert_int_equal(k8s_node_id_annotation_update("{\"d1\":\"n1\",\"d2\":\"n2\"}", "d1", "x", &v), 1);
        assert_non_null(strstr(v, "\"d1\":\"x\""));
        free(v);
        assert_int_equal(k8s_node_id_annotation_update("{\"d1\":\"n1\"}", "d1", NULL, &v), 1);
        assert_null(v); /* remove the annotation */
        assert_int_equal(k8s_node_id_annotation_update("garbage", "d1", "n1", &v), 1);
        assert_string_equal(v, "{\"d1\":\"n1\"}");
        free(v);
        assert_int_equal(k8s_node_id_annotation_update(NULL, "d1", NULL, &v), 0);
        assert_null(v);
}

static void test_csinode_drivers(void **state) {
        _cleanup_(cJSON_Deletep) cJSON *c = cJSON_Parse(
                "{\"metadata\":{\"name\":\"n\",\"resourceVersion\":\"5\"},\"spec\":{\"drivers\":["
                "{\"name\":\"a\",\"nodeID\":\"1\",\"topologyKeys\":[]},"
                "{\"name\":\"b\",\"nodeID\":\"2\",\"topologyKeys\":[\"x\"],\"allocatable\":{\"count\":3}}]}}");
        char *keys[] = { "zone", "region", NULL };
        char *s;

        assert_int_equal(k8s_csinode_update_drivers(c, "a", "1", NULL, 0), 0);
        assert_int_equal(k8s_csinode_update_drivers(c, "b", "2", (char *[]) { "x", NULL }, 3), 0);
        assert_int_equal(k8s_csinode_update_drivers(c, "b", "2", NULL, 3), 1);
        assert_int_equal(k8s_csinode_update_drivers(c, "c", "3", keys, 7), 1);
        assert_int_equal(k8s_csinode_update_drivers(c, "a", NULL, NULL, 0), 1);
        assert_int_equal(k8s_csinode_update_drivers(c, "a", NULL, NULL, 0), 0);
        s = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "spec"));
        assert_string_equal(s, "{\"drivers\":[{\"name\":\"b\",\"nodeID\":\"2\",\"topologyKeys\":[],"
                               "\"allocatable\":{\"count\":3}},"
                               "{\"name\":\"c\",\"nodeID\":\"3\",\"topologyKeys\":[\"region\",\"zone\"],"
                               "\"allocatable\":{\"count\":7}}]}");
        free(s);

        _cleanup_(cJSON_Deletep) cJSON *empty = cJSON_Parse("{\"metadata\":{}}");
        assert_int_equal(k8s_csinode_update_drivers(empty, "a", "1", NULL, 0), 1);
        s = cJSON_PrintUnformatted(empty);
        assert_string_equal(s, "{\"metadata\":{},\"spec\":{\"drivers\":[{\"name\":\"a\",\"nodeID\":\"1\","
                               "\"topologyKeys\":[]}]}}");
        free(s);
}

static void test_format_time(void **state) {
        char buf[32];
        k8s_format_time(T0 + 123456, buf);
        assert_string_equal(buf, "2023-11-14T22:13:20Z");
}

/* Names that would reshape the Event's API path are refused before anything is sent. */
static void test_record_refuses_unsafe_names(void **state) {
        _cleanup_(k8s_client_freep) K8sClient *client = NULL;
        _cleanup_(k8s_event_recorder_freep) K8sEventRecorder *rec = NULL;
        sd_event *event = NULL;
        K8sAuth *auth = calloc(1, sizeof *auth);

        assert_non_null(auth);
        auth->server = strdup("https://127.0.0.1:1");
        auth->token = strdup("t");
        assert_int_equal(sd_event_new(&event), 0);
        assert_int_equal(k8s_client_new(event, auth, &(K8sClientOptions) {}, &client), 0);
        assert_int_equal(k8s_event_recorder_new(client, "kvolumed", "node-a", &rec), 0);
        const char *bad_names[] = { "a/../../nodes/x", "a?b", "A", "", "..", "x y" };
        for (size_t i = 0; i < ELEMENTSOF(bad_names); i++)
                assert_int_equal(k8s_event_record(rec,
                                                  &(K8sObjectRef) { .kind = "Pod", .api_version = "v1",
                                                                    .namespace = "default", .name = bad_names[i],
                                                                    .uid = "u" },
                                                  "Warning", "FailedMount", "m", NULL, NULL),
                                 -EINVAL);
        assert_int_equal(k8s_event_record(rec,
                                          &(K8sObjectRef) { .kind = "Pod", .api_version = "v1",
                                                            .namespace = "bad/ns", .name = "web", .uid = "u" },
                                          "Warning", "FailedMount", "m", NULL, NULL),
                         -EINVAL);
        /* A good name is queued (nothing is sent: the loop never runs). */
        assert_int_equal(k8s_event_record(rec,
                                          &(K8sObjectRef) { .kind = "Pod", .api_version = "v1",
                                                            .namespace = "default", .name = "web", .uid = "u" },
                                          "Warning", "FailedMount", "m", NULL, NULL),
                         0);
        rec = k8s_event_recorder_free(rec);
        client = k8s_client_free(client);
        sd_event_unref(event);
}

/* The host backoff: one probe at a time once the server stops answering,
 * failures of requests from before the last change counted once. */
static void test_host_backoff(void **state) {
        K8sHostBackoff b;
        unsigned e1, e2, e3, ep;
        uint64_t t = T0;

        k8s_host_backoff_init(&b, 200000, 5000000);
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t), 0);
        assert_false(k8s_host_backoff_begin(&b, &e1));
        assert_false(k8s_host_backoff_begin(&b, &e2));
        assert_false(k8s_host_backoff_begin(&b, &e3));
        /* The server goes: three requests on the wire fail, one failure. */
        assert_true(k8s_host_backoff_end(&b, e1, false, false, t));
        assert_false(k8s_host_backoff_end(&b, e2, false, false, t + 10));
        assert_true(k8s_host_backoff_down(&b));
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t + 10), 200000 - 10);
        /* Then one probe; others wait for its end, not for a time. */
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t + 200000), 0);
        assert_true(k8s_host_backoff_begin(&b, &ep));
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t + 300000), UINT64_MAX);
        /* A late failure from before does not count, nor a late answer. */
        assert_false(k8s_host_backoff_end(&b, e3, false, false, t + 300000));
        assert_false(k8s_host_backoff_end(&b, e3, false, true, t + 300000));
        assert_true(k8s_host_backoff_down(&b));
        /* The probe fails: doubled. */
        assert_false(k8s_host_backoff_end(&b, ep, true, false, t + 400000));
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t + 400000), 400000);
        /* Doubling stops at the cap. */
        for (unsigned i = 0; i < 10; i++) {
                t += 10 * USEC_PER_SEC;
                assert_true(k8s_host_backoff_begin(&b, &ep));
                (void) k8s_host_backoff_end(&b, ep, true, false, t);
        }
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t), 5000000);
        /* A cancelled probe lets another go. */
        t += 10 * USEC_PER_SEC;
        assert_true(k8s_host_backoff_begin(&b, &ep));
        k8s_host_backoff_abandon(&b, true);
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t), 0);
        /* Any answer: up again, at once. */
        assert_true(k8s_host_backoff_begin(&b, &ep));
        assert_true(k8s_host_backoff_end(&b, ep, true, true, t));
        assert_false(k8s_host_backoff_down(&b));
        assert_int_equal(k8s_host_backoff_wait_usec(&b, t), 0);
        assert_false(k8s_host_backoff_begin(&b, &e1));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_aggregation),
                cmocka_unit_test(test_spam_filter),
                cmocka_unit_test(test_token_bucket),
                cmocka_unit_test(test_host_backoff),
                cmocka_unit_test(test_backoff),
                cmocka_unit_test(test_node_id_annotation),
                cmocka_unit_test(test_csinode_drivers),
                cmocka_unit_test(test_format_time),
                cmocka_unit_test(test_record_refuses_unsafe_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
