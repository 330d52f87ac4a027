/* SPDX-License-Identifier: Apache-2.0 */
/* The curl/sd-event glue against a real HTTP server (libmicrohttpd running in
 * its own threads in this process). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include <microhttpd.h>

#include <sys/mman.h>
#include <unistd.h>

#include "systemd/curl-loop.h"
#include "systemd/log.h"

static struct MHD_Daemon *daemon_;
static unsigned port;

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **con_cls) {
        char body[256];
        struct MHD_Response *resp;
        enum MHD_Result ret;
        unsigned status = MHD_HTTP_OK;

        if (streq(url, "/slow"))
                sleep(1);
        if (streq(url, "/missing"))
                status = MHD_HTTP_NOT_FOUND;
        const char *n = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "n");
        snprintf(body, sizeof body, "%s %s n=%s", method, url, n ? n : "-");
        resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
        ret = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static int setup(void **state) {
        assert_int_equal(curl_loop_global_init(), 0);
        daemon_ = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                                   serve, NULL, MHD_OPTION_END);
        assert_non_null(daemon_);
        port = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT)->port;
        assert_true(port > 0);
        return 0;
}

static int teardown(void **state) {
        MHD_stop_daemon(daemon_);
        curl_global_cleanup();
        return 0;
}

typedef struct Request {
        CURL *easy;
        char body[256];
        size_t len;
        CURLcode result;
        long status;
        bool done;
        int index;
} Request;

typedef struct Run {
        sd_event *event;
        unsigned pending;
        Request *requests;
        unsigned chain_left; /* for the re-add test */
        char path[32];
} Run;

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
        Request *r = userdata;
        size_t len = size * n;
        if (r->len + len >= sizeof r->body)
                return 0;
        memcpy(r->body + r->len, data, len);
        r->len += len;
        return len;
}

static CURL *make_easy(Request *req, const char *path, int n, long timeout_ms) {
        char url[128];
        CURL *easy = curl_easy_init();
        assert_non_null(easy);
        snprintf(url, sizeof url, "http://127.0.0.1:%u%s?n=%d", port, path, n);
        curl_easy_setopt(easy, CURLOPT_URL, url);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
        curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
        if (timeout_ms > 0)
                curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms);
        req->easy = easy;
        req->index = n;
        return easy;
}

static void on_done(CurlLoop *loop, CURL *easy, CURLcode result, void *userdata) {
        Run *run = userdata;
        Request *req = NULL;

        for (unsigned i = 0;; i++)
                if (run->requests[i].easy == easy) {
                        req = &run->requests[i];
                        break;
                }
        req->result = result;
        req->done = true;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &req->status);
        req->body[req->len] = '\0';
        if (--run->pending == 0)
                sd_event_exit(run->event, 0);
}

static void test_many_parallel_requests(void **state) {
        enum { N = 50 };
        Request reqs[N] = {};
        Run run = { .requests = reqs, .pending = N };
        CurlLoop *loop = NULL;

        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        for (int i = 0; i < N; i++)
                assert_int_equal(curl_loop_add(loop, make_easy(&reqs[i], i % 5 ? "/echo" : "/missing", i, 0),
                                               on_done, &run),
                                 0);
        assert_int_equal(curl_loop_running(loop), N);
        assert_int_equal(sd_event_loop(run.event), 0);
        assert_int_equal(curl_loop_running(loop), 0);
        for (int i = 0; i < N; i++) {
                char want[64];
                snprintf(want, sizeof want, "GET %s n=%d", i % 5 ? "/echo" : "/missing", i);
                assert_true(reqs[i].done);
                assert_int_equal(reqs[i].result, CURLE_OK);
                assert_int_equal(reqs[i].status, i % 5 ? 200 : 404);
                assert_string_equal(reqs[i].body, want);
                curl_easy_cleanup(reqs[i].easy);
        }
        curl_loop_free(loop);
        sd_event_unref(run.event);
}

static void test_timeout(void **state) {
        Request req = {};
        Run run = { .requests = &req, .pending = 1 };
        CurlLoop *loop = NULL;
        uint64_t start, end;

        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        assert_int_equal(curl_loop_add(loop, make_easy(&req, "/slow", 1, 150), on_done, &run), 0);
        sd_event_now(run.event, CLOCK_MONOTONIC, &start);
        assert_int_equal(sd_event_loop(run.event), 0);
        sd_event_now(run.event, CLOCK_MONOTONIC, &end);
        assert_int_equal(req.result, CURLE_OPERATION_TIMEDOUT);
        assert_int_equal(curl_code_to_errno(req.result), -ETIMEDOUT);
        /* Ended by curl's timer, well before the server's one-second answer. */
        assert_true(end - start < 900 * USEC_PER_MSEC);
        curl_easy_cleanup(req.easy);
        curl_loop_free(loop);
        sd_event_unref(run.event);
}

static int on_quit(sd_event_source *s, uint64_t usec, void *userdata) {
        return sd_event_exit(sd_event_source_get_event(s), 0);
}

static void test_cancel(void **state) {
        Request reqs[2] = {};
        Run run = { .requests = reqs, .pending = 2 };
        CurlLoop *loop = NULL;

        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        assert_int_equal(curl_loop_add(loop, make_easy(&reqs[0], "/slow", 0, 0), on_done, &run), 0);
        assert_int_equal(curl_loop_add(loop, make_easy(&reqs[1], "/echo", 1, 0), on_done, &run), 0);
        assert_int_equal(curl_loop_cancel(loop, reqs[0].easy), 0);
        assert_int_equal(curl_loop_cancel(loop, reqs[0].easy), -ENOENT);
        /* Run past the moment the slow answer would have arrived (1 s): nothing
         * may fire for the cancelled transfer. */
        run.pending = 100;
        assert_int_equal(sd_event_add_time_relative(run.event, NULL, CLOCK_MONOTONIC, 1300 * USEC_PER_MSEC, 0,
                                                    on_quit, NULL),
                         0);
        assert_int_equal(sd_event_loop(run.event), 0);
        assert_true(reqs[1].done);
        assert_string_equal(reqs[1].body, "GET /echo n=1");
        assert_int_equal(curl_loop_running(loop), 0);
        assert_false(reqs[0].done);
        curl_easy_cleanup(reqs[0].easy);
        curl_easy_cleanup(reqs[1].easy);
        curl_loop_free(loop);
        sd_event_unref(run.event);
}

static void test_connection_refused(void **state) {
        Request req = {};
        Run run = { .requests = &req, .pending = 1 };
        CurlLoop *loop = NULL;
        unsigned saved = port;

        port = 1; /* nothing listens on tcpmux */
        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        assert_int_equal(curl_loop_add(loop, make_easy(&req, "/echo", 0, 2000), on_done, &run), 0);
        assert_int_equal(sd_event_loop(run.event), 0);
        port = saved;
        assert_int_equal(req.result, CURLE_COULDNT_CONNECT);
        assert_int_equal(curl_code_to_errno(req.result), -ECONNREFUSED);
        curl_easy_cleanup(req.easy);
        curl_loop_free(loop);
        sd_event_unref(run.event);
}

/* A done callback that starts the next request re-enters curl_loop_add. */
static void on_chain_done(CurlLoop *loop, CURL *easy, CURLcode result, void *userdata) {
        Run *run = userdata;
        Request *req = &run->requests[0];

        assert_int_equal(result, CURLE_OK);
        req->done = true;
        if (run->chain_left-- == 0) {
                sd_event_exit(run->event, 0);
                return;
        }
        req->len = 0;
        assert_int_equal(curl_loop_add(loop, easy, on_chain_done, run), 0);
}

static void test_readd_from_callback(void **state) {
        Request req = {};
        Run run = { .requests = &req, .chain_left = 4 };
        CurlLoop *loop = NULL;

        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        assert_int_equal(curl_loop_add(loop, make_easy(&req, "/echo", 7, 0), on_chain_done, &run), 0);
        assert_int_equal(sd_event_loop(run.event), 0);
        assert_int_equal(run.chain_left, (unsigned) -1);
        req.body[req.len] = '\0';
        assert_string_equal(req.body, "GET /echo n=7");
        curl_easy_cleanup(req.easy);
        curl_loop_free(loop);
        sd_event_unref(run.event);
}

static void test_free_with_running_transfers(void **state) {
        Request reqs[3] = {};
        Run run = { .requests = reqs, .pending = 3 };
        CurlLoop *loop = NULL;

        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        for (int i = 0; i < 3; i++)
                assert_int_equal(curl_loop_add(loop, make_easy(&reqs[i], "/slow", i, 0), on_done, &run), 0);
        assert_int_equal(sd_event_run(run.event, 50 * USEC_PER_MSEC) >= 0, 1);
        assert_null(curl_loop_free(loop));
        for (int i = 0; i < 3; i++) {
                assert_false(reqs[i].done);
                curl_easy_cleanup(reqs[i].easy);
        }
        sd_event_unref(run.event);
}

/* Owners cancel their transfers while being freed, after sd_event_loop()
 * returned: curl then re-arms its timer for the transfers left, which a
 * finished sd-event refuses (ESTALE).  That must stay silent: it was the
 * err-level "Failed to arm the curl timer: Stale file handle" of every stop. */
static void test_cancel_after_loop_finished_is_quiet(void **state) {
        Request reqs[2] = {};
        Run run = { .requests = reqs, .pending = 2 };
        CurlLoop *loop = NULL;
        char captured[4096] = {};
        int saved_stderr, fd;
        ssize_t n;

        assert_int_equal(sd_event_new(&run.event), 0);
        assert_int_equal(curl_loop_new(run.event, &loop), 0);
        /* Transfers with a deadline, so that curl always has a timer to arm. */
        for (int i = 0; i < 2; i++)
                assert_int_equal(curl_loop_add(loop, make_easy(&reqs[i], "/slow", i, 5000), on_done, &run), 0);
        assert_int_equal(sd_event_add_time_relative(run.event, NULL, CLOCK_MONOTONIC, 100 * USEC_PER_MSEC, 0,
                                                    on_quit, NULL),
                         0);
        assert_int_equal(sd_event_loop(run.event), 0);
        assert_int_equal(curl_loop_running(loop), 2);

        log_set_target(LOG_TARGET_STDERR);
        fd = memfd_create("stderr", 0);
        assert_true(fd >= 0);
        fflush(stderr);
        saved_stderr = dup(STDERR_FILENO);
        assert_true(dup2(fd, STDERR_FILENO) >= 0);
        assert_int_equal(curl_loop_cancel(loop, reqs[0].easy), 0);
        assert_int_equal(curl_loop_cancel(loop, reqs[1].easy), 0);
        assert_null(curl_loop_free(loop));
        fflush(stderr);
        assert_true(dup2(saved_stderr, STDERR_FILENO) >= 0);
        close(saved_stderr);
        n = pread(fd, captured, sizeof captured - 1, 0);
        close(fd);
        assert_true(n >= 0);
        assert_string_equal(captured, "");

        for (int i = 0; i < 2; i++) {
                assert_false(reqs[i].done);
                curl_easy_cleanup(reqs[i].easy);
        }
        sd_event_unref(run.event);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_many_parallel_requests), cmocka_unit_test(test_timeout),
                cmocka_unit_test(test_cancel),                 cmocka_unit_test(test_connection_refused),
                cmocka_unit_test(test_readd_from_callback),    cmocka_unit_test(test_free_with_running_transfers),
                cmocka_unit_test(test_cancel_after_loop_finished_is_quiet),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
