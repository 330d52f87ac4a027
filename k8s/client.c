/* SPDX-License-Identifier: Apache-2.0 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "k8s/client.h"
#include "k8s/json.h"
#include "k8s/ratelimit.h"
#include "k8s/reachability.h"
#include "systemd/curl-loop.h"
#include "systemd/hashmap.h"
#include "systemd/log.h"

/* Buffered bodies larger than this are refused: a list of 5,000 pods is
 * about 20 MiB, and informers page through lists in 500s anyway. */
#define MAX_BODY_SIZE (256u * 1024u * 1024u)
#define MAX_TOKEN_SIZE (64u * 1024u)
/* A client certificate with its chain, or a key: far below this. */
#define MAX_CLIENT_CERT_SIZE (1024u * 1024u)

typedef enum RequestState {
        REQUEST_QUEUED,
        REQUEST_RUNNING,
        REQUEST_FINISHING,
} RequestState;

struct K8sRequest {
        K8sClient *client;
        K8sRequest *prev, *next;
        RequestState state;
        bool watch;
        bool retried_credentials;
        bool probe;          /* let through alone while the host is taken for down */
        unsigned host_epoch; /* the host backoff's epoch when it started */
        unsigned reach_epoch; /* the reachability's epoch when it started */
        char *method;
        char *path;
        char *content_type;
        char *body;
        uint64_t timeout_usec;
        CURL *easy;
        struct curl_slist *headers;
        char *response;
        size_t response_size, response_alloc;
        k8s_data_t on_data;
        k8s_response_t done;
        void *userdata;
        void (*destroy)(void *userdata);
        char errbuf[CURL_ERROR_SIZE];
        unsigned credentials_used; /* the generation it was sent with, to notice a rotation */
        uint64_t started_usec;  /* CLOCK_MONOTONIC when it was handed to libcurl */
        bool counted;           /* given to the request hook already (a watch's answer started) */
        bool answered;          /* its status line came: the reachability knows */
};

struct K8sClient {
        sd_event *event;
        CurlLoop *loop;
        K8sAuth *auth;
        /* Credentials in files, re-read when they change.  The key comes from
         * the certificate's file when both are one (kubelet's
         * kubelet-client-current.pem): one read gives a matching pair. */
        K8sCredentialFile token_file, cert_file, key_file;
        unsigned credentials_generation; /* bumped whenever one of them changes */
        char *user_agent;
        uint64_t request_timeout_usec;
        bool quiet_reachability;
        K8sTokenBucket bucket;
        K8sHostBackoff host; /* every request and watch waits for it too */
        sd_event_source *bucket_timer;
        K8sRequest *queue_head, *queue_tail; /* waiting for the rate limit, FIFO */
        K8sRequest *running;
        unsigned n_queued, n_running;
        /* Retry-After: the API server answered a path 429 or 503 with the
         * header.  Until that time passes, a request for the path is not
         * sent, whoever makes it: it is answered 429 here with the time
         * left, as the server would answer it.  The expansion check reading
         * a claim must not ignore the Retry-After its lookup was given. */
        Hashmap *held_paths; /* path → uint64_t *: not before (CLOCK_MONOTONIC) */
        char *host_label;    /* the server's host[:port], for the request hook */
        K8sReachability reach; /* k8s/reachability.h */
        k8s_request_hook_t request_hook;
        void *request_hook_userdata;
};

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* --- request metrics -------------------------------------------------------- */

static void request_count(K8sRequest *r, long status) {
        K8sClient *c = r->client;
        K8sRequestMetrics m;

        if (r->counted || !c->request_hook)
                return;
        r->counted = true;
        m = (K8sRequestMetrics) {
                .method = r->method,
                .host = c->host_label,
                .status = status,
                .watch = r->watch,
                .duration_usec = r->watch || r->started_usec == 0 ? 0 : now_usec() - r->started_usec,
        };
        c->request_hook(&m, c->request_hook_userdata);
}

void k8s_client_set_request_hook(K8sClient *c, k8s_request_hook_t hook, void *userdata) {
        c->request_hook = hook;
        c->request_hook_userdata = userdata;
}

/* client-go's host label: the URL's host and port, "none" when it has none. */
static char *server_host(const char *server) {
        const char *p = strstr(server, "://");
        p = p ? p + 3 : server;
        size_t n = strcspn(p, "/?#");
        return n > 0 ? strndup(p, n) : strdup("none");
}

/* --- reachability ----------------------------------------------------------- */

/* One line when the server stops answering, with what to check, and one
 * when it answers again: the requests failing in between are retried by
 * their owners with their own backoffs, and one line each per retry told the
 * operator nothing more (three informers made about one line a second). */

/* The server answered r (its status line, or the whole answer).  At the
 * status line, not only at the end: after an outage met by watches alone
 * (informers resume theirs), the first answers are watches' that stream for
 * minutes, and the line back (and STATUS=) waited for the first of them to
 * end, up to 10 min after the server was back. */
static void reachability_answered(K8sClient *c, K8sRequest *r) {
        uint64_t down_usec = 0;
        unsigned failures = 0;

        if (k8s_reachability_answered(&c->reach, r->reach_epoch, now_usec(), &down_usec, &failures) !=
            K8S_REACHABILITY_BACK)
                return;
        /* What it says next (a watch cut by the next outage) is news from
         * after this answer, not a stale failure of the last outage. */
        r->reach_epoch = k8s_reachability_begin(&c->reach);
        if (!c->quiet_reachability)
                log_info("API server %s answers again, after %.0f s unreachable (%u requests failed meanwhile)",
                         c->auth->server, (double) down_usec / USEC_PER_SEC, failures);
}

static void reachability_note(K8sClient *c, K8sRequest *r, const K8sResponse *resp, CURLcode code) {
        /* A watch cut after its answer started says nothing of the server now. */
        if (resp->status > 0 && !(r->watch && resp->error < 0)) {
                reachability_answered(c, r);
                return;
        }
        if (!k8s_response_unreachable(resp))
                return;
        if (k8s_reachability_failed(&c->reach, r->reach_epoch, resp->message, now_usec()) !=
            K8S_REACHABILITY_DOWN || c->quiet_reachability)
                return;
        if (code == CURLE_PEER_FAILED_VERIFICATION) {
                /* Not the network: the server answered with a certificate that
                 * this configuration does not trust.  Still retried as an
                 * outage is (the host backoff, at most every 5 s), since the
                 * fix may be the server's (a serving certificate rotated
                 * wrongly, then right again); DNS and routes are beside the
                 * point. */
                log_warning("%s. This is a configuration error, not an outage. Volumes stay as they are; "
                            "requests are retried with backoff and logged at debug level until the server's "
                            "certificate verifies", strempty(resp->message));
                return;
        }
        log_warning("API server %s is unreachable: %s. Check that this is the API server's address (the "
                    "kubeconfig's server, or [kubernetes] server), that this node reaches it (DNS, routes, "
                    "firewall, proxy) and that it is up. Volumes stay as they are; requests are retried with "
                    "backoff and logged at debug level until it answers again",
                    c->auth->server, strempty(resp->message));
}

uint64_t k8s_client_unreachable_since(K8sClient *c, const char **ret_error) {
        if (ret_error)
                *ret_error = c->reach.error;
        return c->reach.unreachable_since;
}

/* --- credentials ------------------------------------------------------------ */

/* A stat per file per request is cheap next to the request.  Projected
 * service account tokens are renamed over before they expire; kubelet
 * switches the symlink kubelet-client-current.pem to a new file. */
static void credentials_refresh(K8sClient *c, bool force) {
        bool changed = false;

        changed |= k8s_credential_file_refresh(&c->token_file, force) > 0;
        changed |= k8s_credential_file_refresh(&c->cert_file, force) > 0;
        changed |= k8s_credential_file_refresh(&c->key_file, force) > 0;
        if (changed)
                c->credentials_generation++;
}

static bool credentials_in_files(K8sClient *c) {
        return c->token_file.path || c->cert_file.path || c->key_file.path;
}

static const char *client_token(K8sClient *c) {
        if (c->token_file.path)
                return !isempty(c->token_file.data) ? c->token_file.data : NULL;
        return c->auth->token;
}

static bool client_cert_in_use(K8sClient *c) {
        return c->cert_file.path || c->auth->client_cert_data;
}

/* Failures that a client certificate the server no longer takes can cause.
 * Under TLS 1.3 the server checks the certificate after the client finished
 * its side of the handshake, so its refusal arrives as a failed receive
 * (or send) before any response. */
static bool tls_failure(CURLcode code) {
        switch (code) {
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
                return true;
        default:
                return false;
        }
}

/* --- requests --------------------------------------------------------------- */

static void request_unlink(K8sRequest *r) {
        K8sClient *c = r->client;

        if (r->state == REQUEST_QUEUED) {
                if (r->prev)
                        r->prev->next = r->next;
                else
                        c->queue_head = r->next;
                if (r->next)
                        r->next->prev = r->prev;
                else
                        c->queue_tail = r->prev;
                c->n_queued--;
        } else if (r->state == REQUEST_RUNNING) {
                k8s_host_backoff_abandon(&c->host, r->probe);
                r->probe = false;
                if (r->prev)
                        r->prev->next = r->next;
                else
                        c->running = r->next;
                if (r->next)
                        r->next->prev = r->prev;
                c->n_running--;
        }
        r->prev = r->next = NULL;
}

static void request_free(K8sRequest *r) {
        if (!r)
                return;
        if (r->easy)
                curl_easy_cleanup(r->easy);
        curl_slist_free_all(r->headers);
        free(r->method);
        free(r->path);
        free(r->content_type);
        if (r->body) {
                explicit_bzero(r->body, strlen(r->body));
                free(r->body);
        }
        if (r->response) {
                /* Responses may carry Secrets. */
                explicit_bzero(r->response, r->response_size);
                free(r->response);
        }
        free(r);
}

static void queue_kick(K8sClient *c);

void k8s_request_cancel(K8sRequest *r) {
        if (!r || r->state == REQUEST_FINISHING)
                return;
        if (r->state == REQUEST_RUNNING && r->easy)
                (void) curl_loop_cancel(r->client->loop, r->easy);
        if (r->probe)
                queue_kick(r->client); /* another request probes in its place */
        request_unlink(r);
        if (r->destroy)
                r->destroy(r->userdata);
        request_free(r);
}

static int response_append(K8sRequest *r, const char *data, size_t size) {
        if (r->response_size + size + 1 > r->response_alloc) {
                size_t want = MAX(r->response_alloc * 2, r->response_size + size + 1);
                char *p;
                if (want < 4096)
                        want = 4096;
                if (r->response_size + size > MAX_BODY_SIZE)
                        return -EFBIG;
                p = realloc(r->response, want);
                if (!p)
                        return -ENOMEM;
                r->response = p;
                r->response_alloc = want;
        }
        memcpy(r->response + r->response_size, data, size);
        r->response_size += size;
        r->response[r->response_size] = '\0';
        return 0;
}

/* The first status line of an answer says the server is there (an error
 * status is the server's answer too), for the operator's line (see
 * reachability_answered()) and for the host backoff.  The probe ends there,
 * not at the end of its transfer: a watch is a probe like any request, and
 * its transfer lasts minutes, during which everything else would wait for
 * it.  Called from libcurl's callback: it only logs and arms the pump's
 * timer. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *userdata) {
        K8sRequest *r = userdata;
        K8sClient *c = r->client;
        long status = 0;

        if (r->answered)
                return size * nmemb;
        (void) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status <= 0)
                return size * nmemb;
        r->answered = true;
        reachability_answered(c, r);
        if (r->probe) {
                r->probe = false;
                if (k8s_host_backoff_end(&c->host, r->host_epoch, true, true, now_usec()))
                        log_debug("API server %s answers again (%s %s: %ld): the host backoff ends",
                                  c->auth->server, r->method, r->path, status);
                queue_kick(c);
        }
        return size * nmemb;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userdata) {
        K8sRequest *r = userdata;
        size_t len = size * nmemb;
        long status = 0;

        if (r->watch && r->on_data) {
                (void) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
                if (status == 200) {
                        /* The watch is established: client-go counts it now. */
                        request_count(r, status);
                        return r->on_data(r->client, data, len, r->userdata) < 0 ? 0 : len;
                }
        }
        return response_append(r, data, len) < 0 ? 0 : len;
}

char *k8s_status_message(const char *body, size_t size) {
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        const cJSON *m;
        char *s = NULL;

        if (!body || size == 0)
                return NULL;
        j = cJSON_ParseWithLength(body, size);
        m = cJSON_GetObjectItemCaseSensitive(j, "message");
        if (cJSON_IsString(m) && m->valuestring)
                s = strndup(m->valuestring, 1024);
        return s;
}

static const char *describe_status(long status) {
        switch (status) {
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 409: return "Conflict";
        case 410: return "Gone";
        case 422: return "Unprocessable Entity";
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        default: return "";
        }
}

/* The server's certificate failed verification (CURLE_PEER_FAILED_VERIFICATION):
 * which setting the operator checks.  libcurl's words say which half failed:
 * the name ("subject name", "does not match") or the chain. */
static char *tls_verification_message(K8sClient *c, const char *detail) {
        const K8sAuth *a = c->auth;
        char *m = NULL;
        int n;

        if (strstr(detail, "subject name") || strstr(detail, "does not match"))
                n = asprintf(&m, "API server %s: its certificate does not name this host (%s): check the server "
                             "address (the kubeconfig's server, or [kubernetes] server) against the names the "
                             "certificate is issued for", a->server, detail);
        else if (a->ca_file)
                n = asprintf(&m, "API server %s: the server's certificate is not signed by %s (%s): check that "
                             "certificate-authority in the kubeconfig (or [kubernetes] certificate-authority) is "
                             "this cluster's CA", a->server, a->ca_file, detail);
        else if (a->ca_data)
                n = asprintf(&m, "API server %s: the server's certificate is not signed by the kubeconfig's "
                             "certificate-authority-data (%s): check that it holds this cluster's CA", a->server,
                             detail);
        else
                n = asprintf(&m, "API server %s: the server's certificate is not signed by a CA of the system's "
                             "bundle (%s): set certificate-authority in the kubeconfig (or [kubernetes] "
                             "certificate-authority) to this cluster's CA", a->server, detail);
        return n < 0 ? NULL : m;
}

static char *request_failure_message(K8sRequest *r, CURLcode code, long status) {
        K8sClient *c = r->client;
        _cleanup_free_ char *status_msg = NULL;
        char *m = NULL;
        int n = -1;

        if (code != CURLE_OK) {
                const char *detail = r->errbuf[0] ? r->errbuf : curl_easy_strerror(code);
                switch (code) {
                case CURLE_PEER_FAILED_VERIFICATION:
                        m = tls_verification_message(c, detail);
                        n = m ? 0 : -1;
                        break;
                case CURLE_SSL_CACERT_BADFILE:
                case CURLE_SSL_CONNECT_ERROR:
                case CURLE_SSL_CERTPROBLEM:
                        n = asprintf(&m, "TLS connection to API server %s failed (check the certificate authority "
                                     "and client certificate): %s", c->auth->server, detail);
                        break;
                default:
                        /* A TLS alert before any answer: under TLS 1.3 the server's
                         * refusal of the client certificate comes this way. */
                        if ((code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR) && status == 0 &&
                            client_cert_in_use(c) && strstr(detail, " alert ")) {
                                n = asprintf(&m, "TLS connection to API server %s failed: the client certificate%s%s "
                                             "was refused: %s", c->auth->server, c->cert_file.path ? " from " : "",
                                             strempty(c->cert_file.path), detail);
                                break;
                        }
                        /* libcurl's "Couldn't connect to server" hides what the
                         * operator acts on: refused, no route, timed out. */
                        long os_errno = 0;
                        if (code == CURLE_COULDNT_CONNECT && r->easy &&
                            curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK && os_errno > 0)
                                n = asprintf(&m, "%s %s on API server %s failed: connect: %s (%s)", r->method,
                                             r->path, c->auth->server, strerror((int) os_errno), detail);
                        else
                                n = asprintf(&m, "%s %s on API server %s failed: %s", r->method, r->path,
                                             c->auth->server, detail);
                }
        } else if (status == 401 && !client_token(c) && client_cert_in_use(c)) {
                n = asprintf(&m, "API server %s answered 401 Unauthorized to %s %s: the client certificate%s%s "
                             "is not accepted",
                             c->auth->server, r->method, r->path, c->cert_file.path ? " from " : "",
                             strempty(c->cert_file.path));
        } else if (status == 401) {
                n = asprintf(&m, "API server %s answered 401 Unauthorized to %s %s: the bearer token%s%s is %s",
                             c->auth->server, r->method, r->path, c->token_file.path ? " from " : "",
                             strempty(c->token_file.path), client_token(c) ? "not accepted" : "missing");
        } else if (status >= 300 || status < 200) {
                status_msg = k8s_status_message(r->response, r->response_size);
                n = asprintf(&m, "API server %s answered %ld %s to %s %s%s%s", c->auth->server, status,
                             describe_status(status), r->method, r->path, status_msg ? ": " : "",
                             strempty(status_msg));
        }
        return n < 0 ? NULL : m;
}

static int request_start(K8sRequest *r);

/* --- the host backoff (k8s/ratelimit.h) ---------------------------------------- */

/* Arms the pump to run from the loop, now. */
static void queue_kick(K8sClient *c) {
        if (sd_event_source_set_time(c->bucket_timer, 1) >= 0)
                (void) sd_event_source_set_enabled(c->bucket_timer, SD_EVENT_ONESHOT);
}

/* A whole answer says the server is there; no answer at all (refused,
 * reset, TLS, timed out before a status) counts against the host.  A
 * request cut after its status (a watch, mostly) or given up by us says
 * nothing either way: when the server dies, its watches end so, and they
 * must not clear the failure their neighbours just recorded. */
static void host_backoff_end(K8sRequest *r, bool probe, CURLcode code, long status) {
        K8sClient *c = r->client;
        bool was_down = k8s_host_backoff_down(&c->host);

        if (code != CURLE_OK && (status > 0 || code == CURLE_WRITE_ERROR || code == CURLE_ABORTED_BY_CALLBACK)) {
                k8s_host_backoff_abandon(&c->host, probe);
                if (probe)
                        queue_kick(c);
                return;
        }
        if (k8s_host_backoff_end(&c->host, r->host_epoch, probe, code == CURLE_OK, now_usec())) {
                /* The operator's lines (one down, one back) are
                 * reachability_note()'s; these say what the backoff did. */
                if (was_down)
                        log_debug("API server %s answers again: the host backoff ends", c->auth->server);
                else
                        log_debug("API server %s unreachable (%s %s: %s): requests wait, one connection "
                                    "attempt at a time, %.1f s doubling to %.0f s apart",
                                    c->auth->server, r->method, r->path,
                                    r->errbuf[0] ? r->errbuf : curl_easy_strerror(code),
                                    (double) K8S_HOST_BACKOFF_BASE_USEC / USEC_PER_SEC,
                                    (double) K8S_HOST_BACKOFF_MAX_USEC / USEC_PER_SEC);
                queue_kick(c);
        } else if (probe)
                queue_kick(c);
}

/* --- Retry-After, per path ---------------------------------------------------- */

/* When the path may be asked for again; 0 when now.  Forgets a time past. */
static uint64_t path_held_until(K8sClient *c, const char *path, uint64_t now) {
        uint64_t *until = hashmap_get(c->held_paths, path);

        if (!until)
                return 0;
        if (*until > now)
                return *until;
        free(hashmap_remove(c->held_paths, path));
        return 0;
}

static void path_hold(K8sClient *c, const char *path, uint64_t until) {
        uint64_t *old = hashmap_get(c->held_paths, path), *value;
        uint64_t now = now_usec();
        const char *key;

        if (old) {
                *old = MAX(*old, until);
                return;
        }
        /* Times past go before the set grows: it holds what a storm of 429s
         * named within one Retry-After, no more. */
        for (size_t i = 0; hashmap_size(c->held_paths) >= 64 && hashmap_iterate(c->held_paths, &i, &key, NULL);)
                (void) path_held_until(c, key, now);
        value = malloc(sizeof *value);
        if (!value)
                return;
        *value = until;
        if (hashmap_put(c->held_paths, path, value, NULL) < 0)
                free(value);
}

/* The answer to a request whose path is held, given from the loop: what the
 * server would say, without asking it. */
static void request_answer_held(K8sRequest *r, uint64_t left_usec) {
        K8sClient *c = r->client;
        _cleanup_free_ char *m = NULL;
        K8sResponse resp;

        r->state = REQUEST_FINISHING;
        if (asprintf(&m, "%s %s on API server %s not sent: the server asked for it not to be made for %.1f s "
                     "more (429 Too Many Requests, Retry-After)", r->method, r->path, c->auth->server,
                     (double) left_usec / USEC_PER_SEC) < 0)
                m = NULL;
        resp = (K8sResponse) { .status = 429, .body = "", .retry_after_usec = left_usec, .message = m };
        log_debug("%s", strempty(m));
        r->done(c, &resp, r->userdata);
        request_free(r);
}

static void on_done(CurlLoop *loop, CURL *easy, CURLcode code, void *userdata) {
        K8sRequest *r = userdata;
        K8sClient *c = r->client;
        _cleanup_free_ char *message = NULL;
        curl_off_t retry_after = 0;
        long status = 0;
        K8sResponse resp;

        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        (void) curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &retry_after);

        bool probe = r->probe;
        r->probe = false;
        request_unlink(r);
        host_backoff_end(r, probe, code, status);
        if (code == CURLE_OK && (status == 429 || status == 503) && retry_after > 0)
                path_hold(c, r->path, now_usec() + (uint64_t) retry_after * USEC_PER_SEC);

        /* Refused credentials may have been rotated under us (also in place,
         * with the file's old metadata): read the files again and retry once
         * when they changed.  A TLS failure counts only before any response,
         * so that nothing of a watch was streamed yet. */
        if (credentials_in_files(c) && !r->retried_credentials &&
            ((code == CURLE_OK && status == 401) ||
             (code != CURLE_OK && status == 0 && (c->cert_file.path || c->key_file.path) && tls_failure(code)))) {
                credentials_refresh(c, true);
                if (c->credentials_generation != r->credentials_used) {
                        log_info("%s %s on API server %s was refused, retrying with the credentials read again",
                                 r->method, r->path, c->auth->server);
                        r->retried_credentials = true;
                        request_count(r, code == CURLE_OK ? status : 0);
                        r->counted = false;
                        curl_easy_cleanup(r->easy);
                        r->easy = NULL;
                        curl_slist_free_all(r->headers);
                        r->headers = NULL;
                        r->response_size = 0;
                        if (request_start(r) >= 0)
                                return;
                }
        }

        r->state = REQUEST_FINISHING;
        /* A watch cancelled by its owner (the write callback refused) was
         * counted when its answer started. */
        request_count(r, code == CURLE_OK ? status : 0);
        if (code != CURLE_OK || status < 200 || status >= 300)
                message = request_failure_message(r, code, status);
        resp = (K8sResponse) {
                .error = code == CURLE_OK ? 0 : (code == CURLE_WRITE_ERROR && r->watch ? -ECANCELED : curl_code_to_errno(code)),
                .status = code == CURLE_OK ? status : 0,
                .body = r->response ? r->response : "",
                .size = r->response_size,
                .retry_after_usec = retry_after > 0 ? (uint64_t) retry_after * USEC_PER_SEC : 0,
                .message = message,
        };
        if (resp.error == 0 && status >= 400)
                log_debug("%s", message);
        reachability_note(c, r, &resp, code);
        r->done(c, &resp, r->userdata);
        request_free(r);
}

static int request_setup(K8sRequest *r) {
        K8sClient *c = r->client;
        K8sAuth *a = c->auth;
        _cleanup_free_ char *url = NULL, *bearer = NULL;
        struct curl_slist *h;
        const char *token;
        CURL *e;

        if (asprintf(&url, "%s%s", a->server, r->path) < 0)
                return -ENOMEM;
        e = r->easy = curl_easy_init();
        if (!e)
                return -ENOMEM;

        credentials_refresh(c, false);
        r->credentials_used = c->credentials_generation;
        token = client_token(c);
        /* No "Expect: 100-continue" on HTTP/1.1 bodies: it costs a round trip
         * (or curl's 1 s wait on servers that never answer it). */
        h = curl_slist_append(NULL, "Accept: application/json");
        if (h) {
                struct curl_slist *h0 = curl_slist_append(h, "Expect:");
                if (!h0) {
                        curl_slist_free_all(h);
                        h = NULL;
                } else
                        h = h0;
        }
        if (h && token) {
                if (asprintf(&bearer, "Authorization: Bearer %s", token) < 0)
                        bearer = NULL;
                if (!bearer)
                        h = NULL;
                else {
                        struct curl_slist *h2 = curl_slist_append(h, bearer);
                        if (!h2) {
                                curl_slist_free_all(h);
                                h = NULL;
                        } else
                                h = h2;
                        explicit_bzero(bearer, strlen(bearer));
                }
        }
        if (h && r->content_type) {
                _cleanup_free_ char *ct = NULL;
                if (asprintf(&ct, "Content-Type: %s", r->content_type) < 0)
                        ct = NULL;
                struct curl_slist *h2 = ct ? curl_slist_append(h, ct) : NULL;
                if (!h2) {
                        curl_slist_free_all(h);
                        h = NULL;
                } else
                        h = h2;
        }
        if (!h)
                return -ENOMEM;
        r->headers = h;

        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
        curl_easy_setopt(e, CURLOPT_USERAGENT, c->user_agent);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
        r->errbuf[0] = '\0';
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
        /* Wait for an HTTP/2 connection to multiplex on rather than open another. */
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long) (r->timeout_usec / USEC_PER_MSEC));
        if (!r->watch)
                curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
        /* libcurl 7.88 gives each transfer an upload buffer of 64 KiB that
         * stays until the handle is freed: each watch (pods, CSIDrivers, the
         * Node) kept one for good, 192 KiB of the idle heap
         * (test/bench/memory.sh).  kvolumed's bodies are a few KiB; 16 KiB
         * is libcurl's least. */
        curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);

        if (a->insecure_skip_tls_verify) {
                curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
                curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
        } else {
                curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
                curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
        }
        if (a->ca_data) {
                struct curl_blob blob = { .data = a->ca_data, .len = a->ca_data_size, .flags = CURL_BLOB_COPY };
                curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &blob);
        } else if (a->ca_file)
                curl_easy_setopt(e, CURLOPT_CAINFO, a->ca_file);
        /* The certificate and key go as blobs even when they come from files:
         * libcurl reuses a pooled connection only for a request with the same
         * certificate blob, so after a rotation no request goes out on a
         * connection that was authenticated with the old certificate (a path
         * would still match).  Running watches keep their connection: the
         * server authenticated them when they started. */
        const K8sCredentialFile *key_file = c->key_file.path ? &c->key_file
                                            : c->cert_file.path ? &c->cert_file : NULL;
        struct curl_blob cert_blob = {}, key_blob = {};
        if (a->client_cert_data)
                cert_blob = (struct curl_blob) { .data = a->client_cert_data, .len = a->client_cert_data_size };
        else if (c->cert_file.data)
                cert_blob = (struct curl_blob) { .data = c->cert_file.data, .len = c->cert_file.size };
        if (a->client_key_data)
                key_blob = (struct curl_blob) { .data = a->client_key_data, .len = a->client_key_data_size };
        else if (key_file && key_file->data)
                key_blob = (struct curl_blob) { .data = key_file->data, .len = key_file->size };
        if (cert_blob.data) {
                cert_blob.flags = CURL_BLOB_COPY;
                curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert_blob);
                curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
        }
        if (key_blob.data) {
                key_blob.flags = CURL_BLOB_COPY;
                curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key_blob);
                curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
        }

        if (!streq(r->method, "GET"))
                curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
        if (r->body) {
                curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) strlen(r->body));
                curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
        }
        return 0;
}

static int request_start(K8sRequest *r) {
        K8sClient *c = r->client;
        int k;

        k = request_setup(r);
        if (k < 0)
                return k;
        k = curl_loop_add(c->loop, r->easy, on_done, r);
        if (k < 0)
                return k;
        r->started_usec = now_usec();
        r->probe = k8s_host_backoff_begin(&c->host, &r->host_epoch);
        r->reach_epoch = k8s_reachability_begin(&c->reach);
        r->answered = false;
        r->state = REQUEST_RUNNING;
        r->prev = NULL;
        r->next = c->running;
        if (c->running)
                c->running->prev = r;
        c->running = r;
        c->n_running++;
        return 0;
}

/* Fails a request that could not start, from the loop rather than inside the
 * caller's call, so that callbacks never run re-entrantly. */
static void request_fail_now(K8sRequest *r, int error) {
        K8sClient *c = r->client;
        _cleanup_free_ char *m = NULL;
        K8sResponse resp;

        r->state = REQUEST_FINISHING;
        request_count(r, 0);
        if (asprintf(&m, "%s %s on API server %s could not start: %s", r->method, r->path, c->auth->server,
                     strerror(-error)) < 0)
                m = NULL;
        resp = (K8sResponse) { .error = error, .body = "", .message = m };
        r->done(c, &resp, r->userdata);
        request_free(r);
}

static int on_bucket_timer(sd_event_source *s, uint64_t usec, void *userdata);

static void queue_pump(K8sClient *c) {
        while (c->queue_head) {
                K8sRequest *r = c->queue_head;
                uint64_t wait, held, now = now_usec();
                int k;

                held = path_held_until(c, r->path, now);
                if (held > 0) {
                        request_unlink(r);
                        request_answer_held(r, held - now);
                        continue;
                }
                wait = k8s_host_backoff_wait_usec(&c->host, now);
                if (wait == UINT64_MAX)
                        return; /* the probe's end pumps again */
                if (wait == 0)
                        wait = k8s_token_bucket_wait_usec(&c->bucket, now);
                if (wait > 0) {
                        uint64_t when;
                        (void) sd_event_now(c->event, CLOCK_MONOTONIC, &when);
                        if (sd_event_source_set_time(c->bucket_timer, when + wait) >= 0)
                                (void) sd_event_source_set_enabled(c->bucket_timer, SD_EVENT_ONESHOT);
                        return;
                }
                (void) k8s_token_bucket_take(&c->bucket, now);
                request_unlink(r);
                k = request_start(r);
                if (k < 0)
                        request_fail_now(r, k);
        }
}

static int on_bucket_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        queue_pump(userdata);
        return 0;
}

static int request_new(K8sClient *c, const char *method, const char *path, const char *content_type,
                       const char *body, K8sRequest **ret) {
        K8sRequest *r;

        if (!path || path[0] != '/')
                return -EINVAL;
        r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->client = c;
        r->state = REQUEST_FINISHING; /* not linked yet */
        r->method = strdup(method);
        r->path = strdup(path);
        r->content_type = content_type ? strdup(content_type) : NULL;
        r->body = body ? strdup(body) : NULL;
        if (!r->method || !r->path || (content_type && !r->content_type) || (body && !r->body)) {
                request_free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

/* Everything goes through the queue, watches too (client-go's watches take
 * a token as well), so order is kept under the limit and a dead server is
 * knocked on at the host backoff's pace whoever asks.  Started here when
 * nothing holds it; never called back from here. */
static int request_enqueue(K8sClient *c, K8sRequest *r, K8sRequest **ret) {
        uint64_t now = now_usec();
        int k;

        r->state = REQUEST_QUEUED;
        r->prev = c->queue_tail;
        r->next = NULL;
        if (c->queue_tail)
                c->queue_tail->next = r;
        else
                c->queue_head = r;
        c->queue_tail = r;
        c->n_queued++;
        if (ret)
                *ret = r;
        if (c->n_queued > 1)
                return 0; /* the pump is armed, or waits for the probe */
        if (path_held_until(c, r->path, now) == 0 && k8s_host_backoff_wait_usec(&c->host, now) == 0 &&
            k8s_token_bucket_wait_usec(&c->bucket, now) == 0) {
                (void) k8s_token_bucket_take(&c->bucket, now);
                request_unlink(r);
                k = request_start(r);
                if (k < 0) {
                        request_free(r);
                        if (ret)
                                *ret = NULL;
                        return k;
                }
                return 0;
        }
        /* Held paths are answered, and waits armed, by the pump from the loop. */
        queue_kick(c);
        return 0;
}

int k8s_client_request(K8sClient *c, const char *method, const char *path, const char *content_type,
                       const char *body, k8s_response_t done, void *userdata, K8sRequest **ret) {
        K8sRequest *r;
        int k;

        k = request_new(c, method, path, content_type, body, &r);
        if (k < 0)
                return k;
        r->done = done;
        r->userdata = userdata;
        r->timeout_usec = c->request_timeout_usec;
        return request_enqueue(c, r, ret);
}

int k8s_client_watch(K8sClient *c, const char *path, uint64_t timeout_usec, k8s_data_t on_data, k8s_response_t done,
                     void *userdata, K8sRequest **ret) {
        K8sRequest *r;
        int k;

        k = request_new(c, "GET", path, NULL, NULL, &r);
        if (k < 0)
                return k;
        r->watch = true;
        r->on_data = on_data;
        r->done = done;
        r->userdata = userdata;
        r->timeout_usec = timeout_usec;
        return request_enqueue(c, r, ret);
}

int k8s_client_new(sd_event *event, K8sAuth *auth, const K8sClientOptions *o, K8sClient **ret) {
        _cleanup_(k8s_client_freep) K8sClient *c = NULL;
        static const K8sClientOptions defaults = {};
        int r;

        if (!o)
                o = &defaults;
        c = calloc(1, sizeof *c);
        if (!c) {
                k8s_auth_free(auth);
                return -ENOMEM;
        }
        c->auth = auth;
        c->event = sd_event_ref(event);
        c->request_timeout_usec = o->request_timeout_usec ?: 60 * USEC_PER_SEC;
        c->quiet_reachability = o->quiet_reachability;
        if (asprintf(&c->user_agent, "%s", o->user_agent ?: "kvolumed/" KVOLUMED_VERSION) < 0)
                return -ENOMEM;
        c->host_label = server_host(auth->server);
        if (!c->host_label)
                return -ENOMEM;
        k8s_token_bucket_init(&c->bucket, o->qps > 0 ? o->qps : K8S_DEFAULT_QPS,
                          (double) (o->burst > 0 ? o->burst : K8S_DEFAULT_BURST), now_usec());
        k8s_host_backoff_init(&c->host, K8S_HOST_BACKOFF_BASE_USEC, K8S_HOST_BACKOFF_MAX_USEC);

        if (auth->insecure_skip_tls_verify)
                log_warning("TLS verification of API server %s is off (insecure-skip-tls-verify): "
                            "anyone on the path can impersonate it", auth->server);
        if (strncmp(auth->server, "http://", 7) == 0)
                log_warning("API server %s is reached over plain HTTP", auth->server);
        if (auth->token_file) {
                r = k8s_credential_file_init(&c->token_file, auth->token_file, "token", MAX_TOKEN_SIZE, true);
                if (r < 0)
                        return r;
                r = k8s_credential_file_refresh(&c->token_file, true);
                if (r < 0)
                        return log_error_errno(r, "Cannot read the bearer token file %s for API server %s: %m",
                                               auth->token_file, auth->server);
        }
        /* Inline data, when the kubeconfig has it, is what request_setup() uses;
         * files otherwise.  The parsers let a certificate come only with a key. */
        if (auth->client_cert_file && !auth->client_cert_data) {
                r = k8s_credential_file_init(&c->cert_file, auth->client_cert_file, "client certificate",
                                             MAX_CLIENT_CERT_SIZE, false);
                if (r < 0)
                        return r;
                r = k8s_credential_file_refresh(&c->cert_file, true);
                if (r < 0)
                        return log_error_errno(r, "Cannot read the client certificate %s for API server %s: %m",
                                               auth->client_cert_file, auth->server);
        }
        if (auth->client_key_file && !auth->client_key_data &&
            !streq_ptr(auth->client_key_file, c->cert_file.path)) {
                r = k8s_credential_file_init(&c->key_file, auth->client_key_file, "client key",
                                             MAX_CLIENT_CERT_SIZE, false);
                if (r < 0)
                        return r;
                r = k8s_credential_file_refresh(&c->key_file, true);
                if (r < 0)
                        return log_error_errno(r, "Cannot read the client key %s for API server %s: %m",
                                               auth->client_key_file, auth->server);
        }

        r = curl_loop_new(event, &c->loop);
        if (r < 0)
                return r;
        (void) curl_multi_setopt(curl_loop_multi(c->loop), CURLMOPT_PIPELINING, (long) CURLPIPE_MULTIPLEX);
        r = sd_event_add_time(event, &c->bucket_timer, CLOCK_MONOTONIC, 0, 1, on_bucket_timer, c);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(c->bucket_timer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(c->bucket_timer, "k8s-rate-limit");
        c->held_paths = hashmap_new();
        if (!c->held_paths)
                return -ENOMEM;
        *ret = TAKE_PTR(c);
        return 0;
}

K8sClient *k8s_client_free(K8sClient *c) {
        void *value;

        if (!c)
                return NULL;
        while (c->queue_head)
                k8s_request_cancel(c->queue_head);
        while (c->running)
                k8s_request_cancel(c->running);
        sd_event_source_disable_unref(c->bucket_timer);
        for (size_t i = 0; c->held_paths && hashmap_iterate(c->held_paths, &i, NULL, &value);)
                free(value);
        hashmap_free(c->held_paths);
        curl_loop_free(c->loop);
        k8s_credential_file_done(&c->token_file);
        k8s_credential_file_done(&c->cert_file);
        k8s_credential_file_done(&c->key_file);
        k8s_auth_free(c->auth);
        free(c->user_agent);
        free(c->host_label);
        k8s_reachability_done(&c->reach);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

sd_event *k8s_client_event(K8sClient *c) {
        return c->event;
}

const char *k8s_client_server(K8sClient *c) {
        return c->auth->server;
}

unsigned k8s_client_queued(K8sClient *c) {
        return c->n_queued;
}

unsigned k8s_client_running(K8sClient *c) {
        return c->n_running;
}

char *k8s_escape(const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *out = malloc(n * 3 + 1), *p = out;

        if (!out)
                return NULL;
        for (const unsigned char *i = (const unsigned char *) s; *i; i++) {
                if ((*i >= 'a' && *i <= 'z') || (*i >= 'A' && *i <= 'Z') || (*i >= '0' && *i <= '9') ||
                    strchr("-._~", *i))
                        *p++ = (char) *i;
                else {
                        *p++ = '%';
                        *p++ = hex[*i >> 4];
                        *p++ = hex[*i & 15];
                }
        }
        *p = '\0';
        return out;
}

void k8s_request_set_destroy(K8sRequest *r, void (*destroy)(void *userdata)) {
        r->destroy = destroy;
}
