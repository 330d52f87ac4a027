/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP endpoint against real requests: server and client (libcurl
 * through the project's CurlLoop) share one sd-event loop in this thread,
 * as the server shares the agent's. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "agent/http.h"
#include "systemd/validate.h"
#include "systemd/curl-loop.h"

typedef struct Response {
        CURL *easy;
        char body[4096];
        size_t len;
        char headers[4096];
        size_t headers_len;
        CURLcode result;
        long status;
        bool done;
} Response;

typedef struct Test {
        sd_event *event;
        CurlLoop *loop;
        HttpServer *server;
        unsigned pending;
        unsigned handler_calls;
        pthread_t main_thread;
        bool handler_on_main_thread;
} Test;

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
        Response *r = userdata;
        size_t len = size * n;
        if (r->len + len >= sizeof r->body)
                return 0;
        memcpy(r->body + r->len, data, len);
        r->len += len;
        r->body[r->len] = '\0';
        return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *userdata) {
        Response *r = userdata;
        size_t len = size * n;
        if (r->headers_len + len >= sizeof r->headers)
                return 0;
        memcpy(r->headers + r->headers_len, data, len);
        r->headers_len += len;
        r->headers[r->headers_len] = '\0';
        return len;
}

typedef struct Pending {
        Test *test;
        Response *response;
} Pending;

static void on_request_done(CurlLoop *loop, CURL *easy, CURLcode result, void *userdata) {
        Pending *p = userdata;
        p->response->result = result;
        p->response->done = true;
        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &p->response->status);
        p->test->pending--;
        free(p);
}

static void start_request(Test *t, Response *r, const char *method, const char *path) {
        char url[256];
        Pending *p;

        *r = (Response){};
        r->easy = curl_easy_init();
        assert_non_null(r->easy);
        snprintf(url, sizeof url, "http://%s%s", http_server_address(t->server), path);
        curl_easy_setopt(r->easy, CURLOPT_URL, url);
        curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, 5000L);
        if (streq(method, "HEAD"))
                curl_easy_setopt(r->easy, CURLOPT_NOBODY, 1L);
        else if (streq(method, "POST"))
                curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, "x=1");
        else if (!streq(method, "GET"))
                curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
        p = calloc(1, sizeof *p);
        assert_non_null(p);
        *p = (Pending){ .test = t, .response = r };
        assert_int_equal(curl_loop_add(t->loop, r->easy, on_request_done, p), 0);
        t->pending++;
}

/* Iterates rather than sd_event_loop(): a loop that has exited cannot run
 * again, and one test makes several rounds of requests. */
static void run_requests(Test *t) {
        while (t->pending > 0)
                assert_true(sd_event_run(t->event, UINT64_MAX) >= 0);
}

static void fetch(Test *t, Response *r, const char *method, const char *path) {
        start_request(t, r, method, path);
        run_requests(t);
        assert_int_equal(r->result, CURLE_OK);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
}

static bool has_header(const Response *r, const char *line) {
        return strcasestr(r->headers, line) != NULL;
}

/* ---- handlers --------------------------------------------------------------- */

static int serve_hello(FILE *f, const char **content_type, void *userdata) {
        Test *t = userdata;
        t->handler_calls++;
        t->handler_on_main_thread = pthread_equal(pthread_self(), t->main_thread);
        *content_type = "text/plain; version=0.0.4";
        fputs("hello 1\n", f);
        return 200;
}

static int serve_json(FILE *f, const char **content_type, void *userdata) {
        *content_type = "application/json";
        fputs("{\"a\":1}", f);
        return 200;
}

static int serve_default_type(FILE *f, const char **content_type, void *userdata) {
        fputs("plain", f);
        return 200;
}

static int serve_unavailable(FILE *f, const char **content_type, void *userdata) {
        fputs("stopping\n", f);
        return 503;
}

static int serve_failure(FILE *f, const char **content_type, void *userdata) {
        fputs("half a body", f);
        return -EIO;
}

static int serve_big(FILE *f, const char **content_type, void *userdata) {
        /* Larger than MHD's connection buffer, so that it is sent over several loop iterations. */
        for (int i = 0; i < 20000; i++)
                fprintf(f, "line %05d\n", i);
        return 200;
}

static int setup(void **state) {
        Test *t = calloc(1, sizeof *t);
        assert_non_null(t);
        assert_int_equal(curl_loop_global_init(), 0);
        t->main_thread = pthread_self();
        assert_int_equal(sd_event_new(&t->event), 0);
        assert_int_equal(curl_loop_new(t->event, &t->loop), 0);
        assert_int_equal(http_server_new(t->event, "127.0.0.1:0", &t->server), 0);
        assert_int_equal(http_server_add_route(t->server, "/metrics", serve_hello, t), 0);
        assert_int_equal(http_server_add_route(t->server, "/json", serve_json, t), 0);
        assert_int_equal(http_server_add_route(t->server, "/plain", serve_default_type, t), 0);
        assert_int_equal(http_server_add_route(t->server, "/unavailable", serve_unavailable, t), 0);
        assert_int_equal(http_server_add_route(t->server, "/fail", serve_failure, t), 0);
        assert_int_equal(http_server_add_route(t->server, "/big", serve_big, t), 0);
        *state = t;
        return 0;
}

static int teardown(void **state) {
        Test *t = *state;
        http_server_free(t->server);
        curl_loop_free(t->loop);
        sd_event_unref(t->event);
        free(t);
        curl_global_cleanup();
        return 0;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_port_zero(void **state) {
        Test *t = *state;
        char want[64];

        assert_true(http_server_port(t->server) > 0);
        snprintf(want, sizeof want, "127.0.0.1:%u", http_server_port(t->server));
        assert_string_equal(http_server_address(t->server), want);
}

static void test_get(void **state) {
        Test *t = *state;
        Response r;
        char *type = NULL;

        t->handler_calls = 0;
        start_request(t, &r, "GET", "/metrics");
        run_requests(t);
        assert_int_equal(r.result, CURLE_OK);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "hello 1\n");
        (void) curl_easy_getinfo(r.easy, CURLINFO_CONTENT_TYPE, &type);
        assert_string_equal(type, "text/plain; version=0.0.4");
        curl_easy_cleanup(r.easy);
        assert_int_equal(t->handler_calls, 1);
        /* No MHD thread: the handler ran in the loop's thread. */
        assert_true(t->handler_on_main_thread);
}

static void test_content_types(void **state) {
        Test *t = *state;
        Response r;

        fetch(t, &r, "GET", "/json");
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "{\"a\":1}");
        assert_true(has_header(&r, "Content-Type: application/json\r\n"));

        fetch(t, &r, "GET", "/plain");
        assert_int_equal(r.status, 200);
        assert_true(has_header(&r, "Content-Type: text/plain; charset=utf-8\r\n"));
}

static void test_head(void **state) {
        Test *t = *state;
        Response r;

        fetch(t, &r, "HEAD", "/metrics");
        assert_int_equal(r.status, 200);
        assert_int_equal(r.len, 0);
        assert_true(has_header(&r, "Content-Length: 8\r\n"));
}

static void test_not_found(void **state) {
        Test *t = *state;
        Response r;

        fetch(t, &r, "GET", "/nope");
        assert_int_equal(r.status, 404);
        fetch(t, &r, "GET", "/metrics/");
        assert_int_equal(r.status, 404);
        fetch(t, &r, "GET", "/");
        assert_int_equal(r.status, 404);
        /* The query string is not part of the path. */
        fetch(t, &r, "GET", "/metrics?name=x");
        assert_int_equal(r.status, 200);
}

static void test_method_not_allowed(void **state) {
        Test *t = *state;
        Response r;

        fetch(t, &r, "POST", "/metrics");
        assert_int_equal(r.status, 405);
        assert_true(has_header(&r, "Allow: GET, HEAD\r\n"));
        fetch(t, &r, "DELETE", "/nope");
        assert_int_equal(r.status, 405);
        fetch(t, &r, "PUT", "/healthz");
        assert_int_equal(r.status, 405);
        /* The server is still fine afterwards. */
        fetch(t, &r, "GET", "/metrics");
        assert_int_equal(r.status, 200);
}

static void test_handler_status_and_error(void **state) {
        Test *t = *state;
        Response r;

        fetch(t, &r, "GET", "/unavailable");
        assert_int_equal(r.status, 503);
        assert_string_equal(r.body, "stopping\n");
        fetch(t, &r, "GET", "/fail");
        assert_int_equal(r.status, 500);
        /* Nothing of what the failed handler wrote is sent. */
        assert_null(strstr(r.body, "half a body"));
}

static void test_big_body(void **state) {
        Test *t = *state;
        Response r;
        curl_off_t downloaded = 0;
        FILE *sink = fopen("/dev/null", "w");

        /* The Response buffer is small: count the bytes instead. */
        assert_non_null(sink);
        start_request(t, &r, "GET", "/big");
        curl_easy_setopt(r.easy, CURLOPT_WRITEFUNCTION, (curl_write_callback) NULL);
        curl_easy_setopt(r.easy, CURLOPT_WRITEDATA, sink);
        run_requests(t);
        assert_int_equal(r.result, CURLE_OK);
        assert_int_equal(r.status, 200);
        (void) curl_easy_getinfo(r.easy, CURLINFO_SIZE_DOWNLOAD_T, &downloaded);
        assert_int_equal(downloaded, 20000 * strlen("line 00000\n"));
        curl_easy_cleanup(r.easy);
        fclose(sink);
}

static void test_parallel(void **state) {
        enum { N = 40 };
        Test *t = *state;
        Response *r = calloc(N, sizeof *r);

        assert_non_null(r);
        for (int i = 0; i < N; i++)
                start_request(t, &r[i], i % 4 ? "GET" : "POST", i % 3 ? "/metrics" : "/nope");
        run_requests(t);
        for (int i = 0; i < N; i++) {
                long want = i % 4 == 0 ? 405 : (i % 3 ? 200 : 404);
                assert_int_equal(r[i].result, CURLE_OK);
                assert_int_equal(r[i].status, want);
                if (want == 200)
                        assert_string_equal(r[i].body, "hello 1\n");
                curl_easy_cleanup(r[i].easy);
        }
        free(r);
}

static void test_address_in_use(void **state) {
        Test *t = *state;
        HttpServer *other = NULL;
        char address[64];

        snprintf(address, sizeof address, "127.0.0.1:%u", http_server_port(t->server));
        assert_int_equal(http_server_new(t->event, address, &other), -EADDRINUSE);
        assert_null(other);
}

static void test_routes(void **state) {
        Test *t = *state;

        assert_int_equal(http_server_add_route(t->server, "/metrics", serve_json, t), -EEXIST);
        assert_int_equal(http_server_add_route(t->server, "relative", serve_json, t), -EINVAL);
        assert_int_equal(http_server_add_route(t->server, "/x", NULL, t), -EINVAL);
}

static void test_ipv6(void **state) {
        HttpServer *s = NULL;
        sd_event *event = NULL;
        int r;

        assert_int_equal(sd_event_new(&event), 0);
        r = http_server_new(event, "[::1]:0", &s);
        if (r == -EADDRNOTAVAIL || r == -EAFNOSUPPORT) {
                sd_event_unref(event);
                skip();
        }
        assert_int_equal(r, 0);
        assert_true(strncmp(http_server_address(s), "[::1]:", 6) == 0);
        http_server_free(s);
        sd_event_unref(event);
}

static void test_parse_listen_address(void **state) {
        struct sockaddr_storage sa;
        socklen_t len;

        assert_int_equal(parse_listen_address("127.0.0.1:10284", &sa, &len), 0);
        assert_int_equal(sa.ss_family, AF_INET);
        assert_int_equal(len, sizeof(struct sockaddr_in));
        assert_int_equal(ntohs(((struct sockaddr_in *) &sa)->sin_port), 10284);

        assert_int_equal(parse_listen_address("[::1]:9000", &sa, &len), 0);
        assert_int_equal(sa.ss_family, AF_INET6);
        assert_int_equal(len, sizeof(struct sockaddr_in6));
        assert_int_equal(ntohs(((struct sockaddr_in6 *) &sa)->sin6_port), 9000);
        assert_true(IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *) &sa)->sin6_addr));

        assert_int_equal(parse_listen_address("localhost:0", &sa, &len), 0);
        assert_int_equal(sa.ss_family, AF_INET);
        assert_int_equal(ntohl(((struct sockaddr_in *) &sa)->sin_addr.s_addr), INADDR_LOOPBACK);
        assert_int_equal(ntohs(((struct sockaddr_in *) &sa)->sin_port), 0);

        assert_int_equal(parse_listen_address("0.0.0.0:65535", &sa, &len), 0);

        static const char *const bad[] = {
                "",         "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",   "127.0.0.1:80x",
                "::1:9000", "[::1]9000", "[::1:9000",  "[127.0.0.1]:80",  "example.com:80", ":80",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(parse_listen_address(bad[i], &sa, &len), -EINVAL);
        assert_int_equal(parse_listen_address(NULL, &sa, &len), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_listen_address),
                cmocka_unit_test_setup_teardown(test_port_zero, setup, teardown),
                cmocka_unit_test_setup_teardown(test_get, setup, teardown),
                cmocka_unit_test_setup_teardown(test_content_types, setup, teardown),
                cmocka_unit_test_setup_teardown(test_head, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
                cmocka_unit_test_setup_teardown(test_method_not_allowed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_handler_status_and_error, setup, teardown),
                cmocka_unit_test_setup_teardown(test_big_body, setup, teardown),
                cmocka_unit_test_setup_teardown(test_parallel, setup, teardown),
                cmocka_unit_test_setup_teardown(test_address_in_use, setup, teardown),
                cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
                cmocka_unit_test(test_ipv6),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
