/* SPDX-License-Identifier: Apache-2.0 */
/* The client's behaviour that needs no gRPC server: argument checks, a driver
 * that is not up (UNAVAILABLE at once), a server that never answers (our own
 * deadline, the max-parallel queue, cancellation), and secrets that never
 * reach the log.  Round trips against real gRPC servers are in
 * test/integration/test_csi_*.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "csi/internal.h"
#include "systemd/curl-loop.h"
#include "systemd/log.h"

#define DRIVER "test.csi.kvolumed.io"
#define SECRET "s3cr3t-Value-that-must-not-leak"

typedef struct Result {
        bool done;
        CsiStatus st;
        char message[512];
        uint64_t at;
} Result;

static char tmpdir[64];

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static void on_done(const CsiStatus *st, void *userdata) {
        Result *r = userdata;
        assert_false(r->done);
        r->done = true;
        r->st = *st;
        snprintf(r->message, sizeof r->message, "%s", st->message);
        r->st.message = r->message;
        r->at = now_usec();
}

static void on_info(const CsiStatus *st, const CsiNodeInfo *info, void *userdata) {
        assert_true((st->code == CSI_CODE_OK) == !!info);
        on_done(st, userdata);
}

static void on_expand(const CsiStatus *st, const CsiExpandResult *res, void *userdata) {
        on_done(st, userdata);
}

/* Runs the loop until every result is in, or fails after timeout_usec. */
static void run_until(sd_event *e, Result *r, size_t n, uint64_t timeout_usec) {
        uint64_t end = now_usec() + timeout_usec;
        for (;;) {
                bool all = true;
                for (size_t i = 0; i < n; i++)
                        all = all && r[i].done;
                if (all)
                        return;
                assert_true(now_usec() < end);
                assert_true(sd_event_run(e, 100 * USEC_PER_MSEC) >= 0);
        }
}

static int setup(void **state) {
        assert_int_equal(curl_loop_global_init(), 0);
        snprintf(tmpdir, sizeof tmpdir, "/tmp/kv-csi-test-XXXXXX");
        assert_non_null(mkdtemp(tmpdir));
        return 0;
}

static int teardown(void **state) {
        char path[128];
        snprintf(path, sizeof path, "%s/silent.sock", tmpdir);
        (void) unlink(path);
        (void) rmdir(tmpdir);
        curl_global_cleanup();
        return 0;
}

static CsiClient *new_client(sd_event *e, const char *socket_name, unsigned max_parallel, uint64_t timeout_usec) {
        char endpoint[160];
        CsiClient *c = NULL;

        snprintf(endpoint, sizeof endpoint, "unix://%s/%s", tmpdir, socket_name);
        CsiDriverEndpoint d = { DRIVER, endpoint };
        CsiClientOptions o = { .drivers = &d, .n_drivers = 1, .max_parallel = max_parallel,
                               .call_timeout_usec = timeout_usec };
        assert_int_equal(csi_client_new(e, &o, &c), 0);
        return c;
}

/* A socket that accepts connections into its backlog and never answers. */
static int silent_server(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s/silent.sock", tmpdir);
        (void) unlink(sa.sun_path);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        assert_int_equal(listen(fd, 64), 0);
        return fd;
}

static void test_options(void **state) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        CsiClient *c = NULL;

        assert_int_equal(sd_event_new(&e), 0);
        CsiDriverEndpoint bad_endpoint = { DRIVER, "/no/scheme.sock" };
        assert_int_equal(csi_client_new(e, &(CsiClientOptions){ .drivers = &bad_endpoint, .n_drivers = 1 }, &c),
                         -EINVAL);
        CsiDriverEndpoint bad_name = { "-bad-", "unix:///x.sock" };
        assert_int_equal(csi_client_new(e, &(CsiClientOptions){ .drivers = &bad_name, .n_drivers = 1 }, &c),
                         -EINVAL);
        CsiDriverEndpoint twice[] = { { DRIVER, "unix:///a.sock" }, { DRIVER, "unix:///b.sock" } };
        assert_int_equal(csi_client_new(e, &(CsiClientOptions){ .drivers = twice, .n_drivers = 2 }, &c), -EINVAL);
        assert_int_equal(csi_client_new(e, &(CsiClientOptions){ .registration_dir = "relative" }, &c), -EINVAL);
        assert_null(c);
}

static void test_bad_calls(void **state) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(csi_client_freep) CsiClient *c = NULL;
        Result r = {};

        assert_int_equal(sd_event_new(&e), 0);
        c = new_client(e, "missing.sock", 4, 0);
        assert_true(csi_client_has_driver(c, DRIVER));
        assert_false(csi_client_has_driver(c, "other.csi"));
        assert_int_equal(csi_node_get_info(c, "other.csi", on_info, &r, NULL), -ENOENT);
        assert_int_equal(csi_node_publish_volume(c, DRIVER, &(CsiNodePublishVolumeRequest){ .target_path = "/t" },
                                                 on_done, &r, NULL),
                         -EINVAL);
        assert_int_equal(csi_node_publish_volume(c, DRIVER, &(CsiNodePublishVolumeRequest){ .volume_id = "v" },
                                                 on_done, &r, NULL),
                         -EINVAL);
        assert_int_equal(csi_node_stage_volume(c, DRIVER, &(CsiNodeStageVolumeRequest){ .volume_id = "v" }, on_done,
                                               &r, NULL),
                         -EINVAL);
        assert_int_equal(csi_node_unstage_volume(c, DRIVER, NULL, on_done, &r, NULL), -EINVAL);
        assert_int_equal(csi_node_get_info(c, DRIVER, NULL, &r, NULL), -EINVAL);
        /* Nothing was started: no callback may come. */
        assert_int_equal(sd_event_run(e, 0), 0);
        assert_false(r.done);
}

typedef struct Metric {
        unsigned n;
        CsiCode code;
        char method[64];
} Metric;

static void on_metrics(const CsiCallMetrics *m, void *userdata) {
        Metric *x = userdata;
        x->n++;
        x->code = m->code;
        snprintf(x->method, sizeof x->method, "%s", m->method);
        assert_string_equal(m->driver, DRIVER);
}

static void test_not_up_is_unavailable_at_once(void **state) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(csi_client_freep) CsiClient *c = NULL;
        Result r = {};
        Metric m = {};
        uint64_t t0;

        assert_int_equal(sd_event_new(&e), 0);
        c = new_client(e, "missing.sock", 4, 0);
        csi_client_set_metrics_hook(c, on_metrics, &m);
        t0 = now_usec();
        assert_int_equal(csi_node_get_info(c, DRIVER, on_info, &r, NULL), 0);
        assert_false(r.done); /* never from inside the call function */
        run_until(e, &r, 1, 5 * USEC_PER_SEC);
        assert_int_equal(r.st.code, CSI_CODE_UNAVAILABLE);
        assert_false(csi_code_is_final(r.st.code));
        assert_string_equal(r.st.method, "/csi.v1.Node/NodeGetInfo");
        assert_true(r.at - t0 < 200 * USEC_PER_MSEC);
        assert_int_equal(m.n, 1);
        assert_int_equal(m.code, CSI_CODE_UNAVAILABLE);
        assert_string_equal(m.method, "/csi.v1.Node/NodeGetInfo");
}

static void test_deadline_queue_cancel(void **state) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(csi_client_freep) CsiClient *c = NULL;
        _cleanup_close_ int fd = -1;
        Result r[3] = {};
        CsiCall *calls[3] = {};
        Metric m = {};
        uint64_t t0;

        assert_int_equal(sd_event_new(&e), 0);
        fd = silent_server();
        /* One call at a time, 300 ms each. */
        c = new_client(e, "silent.sock", 1, 300 * USEC_PER_MSEC);
        csi_client_set_metrics_hook(c, on_metrics, &m);
        t0 = now_usec();
        for (size_t i = 0; i < 3; i++)
                assert_int_equal(csi_node_get_info(c, DRIVER, on_info, &r[i], &calls[i]), 0);
        /* The second, queued behind the first, is withdrawn. */
        csi_call_cancel(calls[1]);
        r[1].done = true;
        run_until(e, r, 3, 5 * USEC_PER_SEC);

        /* The first times out at its deadline; the third waited in the queue
         * and its deadline counted from its call, so it ends then too. */
        assert_int_equal(r[0].st.code, CSI_CODE_DEADLINE_EXCEEDED);
        assert_int_equal(r[2].st.code, CSI_CODE_DEADLINE_EXCEEDED);
        assert_true(r[0].at - t0 >= 290 * USEC_PER_MSEC);
        assert_true(r[0].at - t0 < 700 * USEC_PER_MSEC);
        assert_true(r[2].at - t0 < 900 * USEC_PER_MSEC);
        assert_int_equal(m.n, 3); /* the cancelled one counts as Canceled */
}

static void test_cancel_running(void **state) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(csi_client_freep) CsiClient *c = NULL;
        _cleanup_close_ int fd = -1;
        Result r[2] = {};
        CsiCall *first = NULL;
        Metric m = {};

        assert_int_equal(sd_event_new(&e), 0);
        fd = silent_server();
        c = new_client(e, "silent.sock", 1, 400 * USEC_PER_MSEC);
        csi_client_set_metrics_hook(c, on_metrics, &m);
        assert_int_equal(csi_node_get_info(c, DRIVER, on_info, &r[0], &first), 0);
        assert_int_equal(csi_node_get_info(c, DRIVER, on_info, &r[1], NULL), 0);
        /* Let the first one get onto the wire. */
        for (int i = 0; i < 5; i++)
                assert_true(sd_event_run(e, 10 * USEC_PER_MSEC) >= 0);
        csi_call_cancel(first);
        assert_int_equal(m.n, 1);
        assert_int_equal(m.code, CSI_CODE_CANCELLED);
        /* The slot is free: the second runs and meets its own deadline. */
        run_until(e, &r[1], 1, 5 * USEC_PER_SEC);
        assert_false(r[0].done);
        assert_int_equal(r[1].st.code, CSI_CODE_DEADLINE_EXCEEDED);
}

/* Debug logging of a request with secrets, captured from stderr. */
static void test_secrets_never_logged(void **state) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(csi_client_freep) CsiClient *c = NULL;
        char path[128], text[65536];
        int saved, fd, level = log_get_max_level();
        LogTarget target = log_get_target();
        Result r[3] = {};
        ssize_t n;

        static const CsiKeyValue secrets[] = { { "password", SECRET }, { "token", SECRET "-2" } };
        static const CsiKeyValue context[] = { { "size", "1Gi" } };
        static const char *const flags[] = { "ro", "noatime" };
        CsiVolumeCapability cap = { .access_type = CSI_ACCESS_TYPE_MOUNT, .fs_type = "ext4", .mount_flags = flags,
                                    .n_mount_flags = 2, .access_mode = CSI_ACCESS_MODE_SINGLE_NODE_WRITER };

        snprintf(path, sizeof path, "%s/log", tmpdir);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        saved = dup(STDERR_FILENO);
        assert_true(saved >= 0);
        fflush(stderr);
        assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
        log_set_target(LOG_TARGET_STDERR);
        log_set_max_level(LOG_DEBUG);

        assert_int_equal(sd_event_new(&e), 0);
        c = new_client(e, "missing.sock", 4, 0);
        assert_int_equal(csi_node_stage_volume(c, DRIVER,
                                               &(CsiNodeStageVolumeRequest){ .volume_id = "vol-1",
                                                                             .staging_target_path = "/stage",
                                                                             .volume_capability = &cap,
                                                                             .secrets = secrets,
                                                                             .n_secrets = 2,
                                                                             .volume_context = context,
                                                                             .n_volume_context = 1 },
                                               on_done, &r[0], NULL),
                         0);
        assert_int_equal(csi_node_publish_volume(c, DRIVER,
                                                 &(CsiNodePublishVolumeRequest){ .volume_id = "vol-1",
                                                                                 .target_path = "/target",
                                                                                 .volume_capability = &cap,
                                                                                 .secrets = secrets,
                                                                                 .n_secrets = 2 },
                                                 on_done, &r[1], NULL),
                         0);
        assert_int_equal(csi_node_expand_volume(c, DRIVER,
                                                &(CsiNodeExpandVolumeRequest){ .volume_id = "vol-1",
                                                                               .volume_path = "/target",
                                                                               .secrets = secrets,
                                                                               .n_secrets = 2 },
                                                on_expand, &r[2], NULL),
                         0);
        run_until(e, r, 3, 5 * USEC_PER_SEC);

        fflush(stderr);
        assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
        close(saved);
        log_set_max_level(level);
        log_set_target(target);

        n = pread(fd, text, sizeof text - 1, 0);
        close(fd);
        (void) unlink(path);
        assert_true(n > 0);
        text[n] = 0;
        /* The log did describe the requests, in detail ... */
        assert_non_null(strstr(text, "NodeStageVolume on " DRIVER ": request"));
        assert_non_null(strstr(text, "NodePublishVolume on " DRIVER ": request"));
        assert_non_null(strstr(text, "NodeExpandVolume on " DRIVER ": request"));
        assert_non_null(strstr(text, "VOLUME_HANDLE=vol-1"));
        assert_non_null(strstr(text, "CSI_CODE=Unavailable"));
        assert_non_null(strstr(text, "\"size\":\"1Gi\""));
        assert_non_null(strstr(text, "noatime"));
        assert_non_null(strstr(text, "secrets:<2 redacted>"));
        /* ... and never a secret, nor its key. */
        assert_null(strstr(text, SECRET));
        assert_null(strstr(text, "password"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_options),
                cmocka_unit_test(test_bad_calls),
                cmocka_unit_test(test_not_up_is_unavailable_at_once),
                cmocka_unit_test(test_deadline_queue_cancel),
                cmocka_unit_test(test_cancel_running),
                cmocka_unit_test(test_secrets_never_logged),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
