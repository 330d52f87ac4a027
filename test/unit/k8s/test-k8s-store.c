/* SPDX-License-Identifier: Apache-2.0 */
/* The informer's store, its relist diff, and the watch stream splitter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "k8s/json-stream.h"
#include "k8s/store.h"

static K8sPod *mkpod(const char *ns, const char *name, const char *uid, const char *rv) {
        K8sPod *p = calloc(1, sizeof *p);
        assert_non_null(p);
        p->meta.namespace = strdup(ns);
        p->meta.name = strdup(name);
        p->meta.uid = strdup(uid);
        p->meta.resource_version = strdup(rv);
        return p;
}

static void test_store_basic(void **state) {
        _cleanup_(k8s_store_freep) K8sStore *s = NULL;
        void *old;
        char name[32];

        assert_int_equal(k8s_store_new(&k8s_kind_pod, &s), 0);
        for (int i = 0; i < 5000; i++) {
                snprintf(name, sizeof name, "p%d", i);
                assert_int_equal(k8s_store_put(s, mkpod("ns", name, name, "1"), &old), 0);
                assert_null(old);
        }
        assert_int_equal(k8s_store_size(s), 5000);
        K8sPod *p = k8s_store_get(s, "ns", "p4321");
        assert_non_null(p);
        assert_string_equal(p->meta.uid, "p4321");
        assert_null(k8s_store_get(s, "other", "p4321"));

        assert_int_equal(k8s_store_put(s, mkpod("ns", "p7", "p7", "2"), &old), 0);
        assert_non_null(old);
        assert_string_equal(((K8sPod *) old)->meta.resource_version, "1");
        k8s_pod_free(old);
        assert_int_equal(k8s_store_size(s), 5000);

        /* Remove every other one; the rest must stay reachable (backward shift). */
        for (int i = 0; i < 5000; i += 2) {
                snprintf(name, sizeof name, "p%d", i);
                k8s_store_remove(s, "ns", name, &old);
                assert_non_null(old);
                k8s_pod_free(old);
        }
        k8s_store_remove(s, "ns", "p0", &old);
        assert_null(old);
        assert_int_equal(k8s_store_size(s), 2500);
        for (int i = 1; i < 5000; i += 2) {
                snprintf(name, sizeof name, "p%d", i);
                assert_non_null(k8s_store_get(s, "ns", name));
        }
        size_t cursor = 0, n = 0;
        while (k8s_store_next(s, &cursor))
                n++;
        assert_int_equal(n, 2500);
}

static K8sDelta *find_delta(K8sDelta *d, size_t n, K8sDeltaType type, const char *name) {
        for (size_t i = 0; i < n; i++) {
                K8sMeta *m = d[i].type == K8S_DELTA_DELETE ? d[i].old : d[i].new;
                if (d[i].type == type && streq(m->name, name))
                        return &d[i];
        }
        return NULL;
}

static void test_relist_diff(void **state) {
        _cleanup_(k8s_store_freep) K8sStore *s = NULL;
        K8sDelta *d = NULL;
        size_t n = 0;
        void *old;

        assert_int_equal(k8s_store_new(&k8s_kind_pod, &s), 0);
        /* Before: same (rv 1), changed (rv 1), gone (rv 1), recreated (uid u4). */
        assert_int_equal(k8s_store_put(s, mkpod("a", "same", "u1", "1"), &old), 0);
        assert_int_equal(k8s_store_put(s, mkpod("a", "changed", "u2", "1"), &old), 0);
        assert_int_equal(k8s_store_put(s, mkpod("a", "gone", "u3", "1"), &old), 0);
        assert_int_equal(k8s_store_put(s, mkpod("a", "recreated", "u4", "1"), &old), 0);
        K8sPod *same_before = k8s_store_get(s, "a", "same");

        void **items = calloc(5, sizeof(void *));
        items[0] = mkpod("a", "same", "u1", "1");
        items[1] = mkpod("a", "changed", "u2", "5");
        items[2] = mkpod("a", "recreated", "u5", "6");
        items[3] = mkpod("a", "new", "u6", "7");
        items[4] = mkpod("a", "new", "u6", "8"); /* duplicate: the last wins */
        assert_int_equal(k8s_store_replace(s, items, 5, NULL, &d, &n), 0);

        assert_int_equal(n, 5);
        K8sDelta *x = find_delta(d, n, K8S_DELTA_UPDATE, "changed");
        assert_non_null(x);
        assert_string_equal(((K8sPod *) x->old)->meta.resource_version, "1");
        assert_string_equal(((K8sPod *) x->new)->meta.resource_version, "5");
        x = find_delta(d, n, K8S_DELTA_DELETE, "gone");
        assert_non_null(x);
        assert_null(x->new);
        x = find_delta(d, n, K8S_DELTA_DELETE, "recreated");
        assert_non_null(x);
        assert_string_equal(((K8sPod *) x->old)->meta.uid, "u4");
        x = find_delta(d, n, K8S_DELTA_ADD, "recreated");
        assert_non_null(x);
        assert_string_equal(((K8sPod *) x->new)->meta.uid, "u5");
        x = find_delta(d, n, K8S_DELTA_ADD, "new");
        assert_non_null(x);
        assert_string_equal(((K8sPod *) x->new)->meta.resource_version, "8");
        assert_null(find_delta(d, n, K8S_DELTA_UPDATE, "same"));
        /* Deletes come after adds and updates. */
        assert_int_equal(d[n - 1].type, K8S_DELTA_DELETE);
        k8s_deltas_free(&k8s_kind_pod, d, n);

        assert_int_equal(k8s_store_size(s), 4);
        assert_ptr_equal(k8s_store_get(s, "a", "same"), same_before);
        assert_null(k8s_store_get(s, "a", "gone"));

        /* An empty list deletes everything. */
        assert_int_equal(k8s_store_replace(s, NULL, 0, NULL, &d, &n), 0);
        assert_int_equal(n, 4);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(d[i].type, K8S_DELTA_DELETE);
        k8s_deltas_free(&k8s_kind_pod, d, n);
        assert_int_equal(k8s_store_size(s), 0);
}

/* A listed object that could not be decoded is not "gone": it keeps its last
 * good version, and nothing is reported for it. */
static void test_relist_keeps_unreadable_objects(void **state) {
        _cleanup_(k8s_store_freep) K8sStore *s = NULL;
        K8sDelta *d = NULL;
        size_t n = 0;
        void *old;

        assert_int_equal(k8s_store_new(&k8s_kind_pod, &s), 0);
        assert_int_equal(k8s_store_put(s, mkpod("a", "running", "u1", "1"), &old), 0);
        assert_int_equal(k8s_store_put(s, mkpod("a", "gone", "u2", "1"), &old), 0);
        K8sPod *running = k8s_store_get(s, "a", "running");
        char *keep[] = { k8s_store_key(s, "a", "running"), NULL };
        assert_string_equal(keep[0], "a/running");

        assert_int_equal(k8s_store_replace(s, NULL, 0, keep, &d, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(d[0].type, K8S_DELTA_DELETE);
        assert_string_equal(((K8sPod *) d[0].old)->meta.name, "gone");
        k8s_deltas_free(&k8s_kind_pod, d, n);
        assert_int_equal(k8s_store_size(s), 1);
        assert_ptr_equal(k8s_store_get(s, "a", "running"), running);

        /* Once it is missing from a list for real, it goes. */
        assert_int_equal(k8s_store_replace(s, NULL, 0, NULL, &d, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(((K8sPod *) d[0].old)->meta.name, "running");
        k8s_deltas_free(&k8s_kind_pod, d, n);
        free(keep[0]);
}

static void test_cluster_scoped_keys(void **state) {
        _cleanup_(k8s_store_freep) K8sStore *s = NULL;
        K8sNode *n = calloc(1, sizeof *n);
        void *old;

        n->meta.name = strdup("node-1");
        n->meta.namespace = strdup("ignored");
        assert_int_equal(k8s_store_new(&k8s_kind_node, &s), 0);
        assert_int_equal(k8s_store_put(s, n, &old), 0);
        assert_ptr_equal(k8s_store_get(s, NULL, "node-1"), n);
        assert_ptr_equal(k8s_store_get(s, "whatever", "node-1"), n);
}

typedef struct Collected {
        char *texts[16];
        size_t n;
} Collected;

static int collect(const char *text, size_t size, void *userdata) {
        Collected *c = userdata;
        assert_true(c->n < 16);
        c->texts[c->n++] = strndup(text, size);
        return 0;
}

static void collected_free(Collected *c) {
        for (size_t i = 0; i < c->n; i++)
                free(c->texts[i]);
        c->n = 0;
}

static void test_json_stream_chunks(void **state) {
        const char *stream = "{\"type\":\"ADDED\",\"object\":{\"a\":\"}{\\\"\",\"b\":[1,{\"c\":2}]}}\n"
                             "{\"type\":\"BOOKMARK\",\"object\":{}}\n  {\"x\":1}";
        size_t len = strlen(stream);

        /* Every way of cutting the stream in two gives the same three objects. */
        for (size_t cut = 0; cut <= len; cut++) {
                K8sJsonStream s;
                Collected c = {};
                k8s_json_stream_init(&s, K8S_MAX_WATCH_EVENT);
                assert_int_equal(k8s_json_stream_feed(&s, stream, cut, collect, &c), 0);
                assert_int_equal(k8s_json_stream_feed(&s, stream + cut, len - cut, collect, &c), 0);
                assert_int_equal(c.n, 3);
                assert_string_equal(c.texts[0], "{\"type\":\"ADDED\",\"object\":{\"a\":\"}{\\\"\",\"b\":[1,{\"c\":2}]}}");
                assert_string_equal(c.texts[1], "{\"type\":\"BOOKMARK\",\"object\":{}}");
                assert_string_equal(c.texts[2], "{\"x\":1}");
                collected_free(&c);
                k8s_json_stream_done(&s);
        }
        /* Byte by byte. */
        K8sJsonStream s;
        Collected c = {};
        k8s_json_stream_init(&s, K8S_MAX_WATCH_EVENT);
        for (size_t i = 0; i < len; i++)
                assert_int_equal(k8s_json_stream_feed(&s, stream + i, 1, collect, &c), 0);
        assert_int_equal(c.n, 3);
        collected_free(&c);
        k8s_json_stream_done(&s);
}

static void test_json_stream_limits(void **state) {
        K8sJsonStream s;
        Collected c = {};
        char chunk[4096];

        k8s_json_stream_init(&s, 1000);
        assert_int_equal(k8s_json_stream_feed(&s, "{\"a\":\"", 6, collect, &c), 0);
        memset(chunk, 'x', sizeof chunk);
        assert_int_equal(k8s_json_stream_feed(&s, chunk, sizeof chunk, collect, &c), -EFBIG);
        k8s_json_stream_done(&s);

        k8s_json_stream_init(&s, 1000);
        assert_int_equal(k8s_json_stream_feed(&s, "{}\nnot json", 11, collect, &c), -EBADMSG);
        assert_int_equal(c.n, 1);
        collected_free(&c);
        k8s_json_stream_done(&s);

        /* The real limit: 16 MiB in 1 MiB chunks. */
        k8s_json_stream_init(&s, K8S_MAX_WATCH_EVENT);
        char *mib = malloc(1024 * 1024);
        memset(mib, ' ', 1024 * 1024);
        assert_int_equal(k8s_json_stream_feed(&s, "{\"a\":", 5, collect, &c), 0);
        int r = 0;
        for (int i = 0; i < 17 && r == 0; i++)
                r = k8s_json_stream_feed(&s, mib, 1024 * 1024, collect, &c);
        assert_int_equal(r, -EFBIG);
        free(mib);
        k8s_json_stream_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_store_basic),
                cmocka_unit_test(test_relist_diff),
                cmocka_unit_test(test_relist_keeps_unreadable_objects),
                cmocka_unit_test(test_cluster_scoped_keys),
                cmocka_unit_test(test_json_stream_chunks),
                cmocka_unit_test(test_json_stream_limits),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
