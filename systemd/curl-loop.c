/* SPDX-License-Identifier: Apache-2.0 */
#include <stdbool.h>

#include "systemd/curl-loop.h"
#include "systemd/log.h"

typedef struct CurlTransfer {
        CurlLoop *loop;
        CURL *easy;
        curl_loop_done_t done;
        void *userdata;
        struct CurlTransfer *prev, *next;
} CurlTransfer;

struct CurlLoop {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
        CurlTransfer *transfers; /* running, so that free can detach them */
        unsigned n_running;
};

static void transfer_link(CurlLoop *loop, CurlTransfer *t) {
        t->prev = NULL;
        t->next = loop->transfers;
        if (loop->transfers)
                loop->transfers->prev = t;
        loop->transfers = t;
        loop->n_running++;
}

/* Detaches t from the multi handle and frees it; the easy handle stays the caller's. */
static void transfer_drop(CurlLoop *loop, CurlTransfer *t) {
        if (t->prev)
                t->prev->next = t->next;
        else
                loop->transfers = t->next;
        if (t->next)
                t->next->prev = t->prev;
        loop->n_running--;
        (void) curl_multi_remove_handle(loop->multi, t->easy);
        (void) curl_easy_setopt(t->easy, CURLOPT_PRIVATE, NULL);
        free(t);
}

int curl_loop_global_init(void) {
        CURLcode c = curl_global_init(CURL_GLOBAL_ALL);
        if (c != CURLE_OK)
                return log_error_errno(EIO, "Failed to initialise libcurl: %s", curl_easy_strerror(c));
        return 0;
}

int curl_code_to_errno(CURLcode code) {
        switch (code) {
        case CURLE_OK:
                return 0;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
                return -ECONNRESET;
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CERTPROBLEM:
                return -EPERM;
        case CURLE_WRITE_ERROR:
        case CURLE_ABORTED_BY_CALLBACK:
                return -ECANCELED;
        case CURLE_FILESIZE_EXCEEDED:
                return -EFBIG;
        default:
                return -EIO;
        }
}

/* Reaps every finished transfer and hands it to its owner. */
static void curl_loop_process_done(CurlLoop *loop) {
        CURLMsg *msg;
        int left;

        while ((msg = curl_multi_info_read(loop->multi, &left))) {
                CurlTransfer *t = NULL;
                CURL *easy = msg->easy_handle;
                CURLcode result = msg->data.result;

                if (msg->msg != CURLMSG_DONE)
                        continue;
                (void) curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &t);
                if (!t)
                        continue;
                curl_loop_done_t done = t->done;
                void *userdata = t->userdata;
                transfer_drop(loop, t);
                /* May add or cancel transfers: info_read copes with that. */
                done(loop, easy, result, userdata);
        }
}

static void curl_loop_act(CurlLoop *loop, curl_socket_t fd, int flags) {
        int running = 0;
        CURLMcode mc = curl_multi_socket_action(loop->multi, fd, flags, &running);
        if (mc != CURLM_OK)
                log_warning("curl_multi_socket_action failed: %s", curl_multi_strerror(mc));
        curl_loop_process_done(loop);
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        CurlLoop *loop = userdata;
        int flags = 0;

        if (revents & (EPOLLIN | EPOLLPRI | EPOLLRDHUP))
                flags |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                flags |= CURL_CSELECT_OUT;
        if (revents & (EPOLLERR | EPOLLHUP))
                flags |= CURL_CSELECT_ERR;
        curl_loop_act(loop, fd, flags);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        curl_loop_act(userdata, CURL_SOCKET_TIMEOUT, 0);
        return 0;
}

static bool loop_finished(CurlLoop *loop) {
        return sd_event_get_state(loop->event) == SD_EVENT_FINISHED;
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
        CurlLoop *loop = userp;
        sd_event_source *source = socketp;
        uint32_t events = 0;
        int r;

        if (what == CURL_POLL_REMOVE) {
                if (source) {
                        (void) curl_multi_assign(loop->multi, fd, NULL);
                        sd_event_source_disable_unref(source);
                }
                return 0;
        }
        /* A handle removed after the loop finished (the owners are being
         * freed) cannot be watched, and needs not be: nothing runs any more. */
        if (loop_finished(loop))
                return 0;
        if (what & CURL_POLL_IN)
                events |= EPOLLIN;
        if (what & CURL_POLL_OUT)
                events |= EPOLLOUT;

        if (source) {
                r = sd_event_source_set_io_events(source, events);
                if (r >= 0)
                        r = sd_event_source_set_enabled(source, SD_EVENT_ON);
        } else {
                r = sd_event_add_io(loop->event, &source, fd, events, on_io, loop);
                if (r >= 0) {
                        (void) sd_event_source_set_description(source, "curl-socket");
                        if (curl_multi_assign(loop->multi, fd, source) != CURLM_OK) {
                                sd_event_source_disable_unref(source);
                                r = -EIO;
                        }
                }
        }
        if (r < 0) {
                log_error_errno(r, "Failed to watch a curl socket: %m");
                return -1;
        }
        return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp) {
        CurlLoop *loop = userp;
        uint64_t now;
        int r;

        /* Removing a handle makes curl re-arm its timer; once the loop has
         * finished, sd-event refuses that with ESTALE, and no transfer could
         * run anyway: a normal stop must not log an error for it. */
        if (loop_finished(loop))
                return 0;
        if (timeout_ms < 0) {
                if (loop->timer)
                        (void) sd_event_source_set_enabled(loop->timer, SD_EVENT_OFF);
                return 0;
        }

        r = sd_event_now(loop->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return -1;
        /* curl asks for 0 ms to be called "as soon as possible": never from
         * inside this callback, hence a timer that fires on the next iteration. */
        uint64_t when = now + (uint64_t) timeout_ms * USEC_PER_MSEC;

        if (!loop->timer) {
                /* Accuracy 1 µs: 0 would mean sd-event's default of 250 ms, and
                 * every transfer would start up to a quarter second late. */
                r = sd_event_add_time(loop->event, &loop->timer, CLOCK_MONOTONIC, when, 1, on_timer, loop);
                if (r < 0) {
                        log_error_errno(r, "Failed to add the curl timer: %m");
                        return -1;
                }
                (void) sd_event_source_set_description(loop->timer, "curl-timer");
        } else {
                r = sd_event_source_set_time(loop->timer, when);
                if (r >= 0)
                        r = sd_event_source_set_enabled(loop->timer, SD_EVENT_ONESHOT);
                if (r < 0) {
                        log_error_errno(r, "Failed to arm the curl timer: %m");
                        return -1;
                }
        }
        return 0;
}

int curl_loop_new(sd_event *event, CurlLoop **ret) {
        _cleanup_(curl_loop_freep) CurlLoop *loop = NULL;

        loop = calloc(1, sizeof *loop);
        if (!loop)
                return -ENOMEM;
        loop->event = sd_event_ref(event);
        loop->multi = curl_multi_init();
        if (!loop->multi)
                return -ENOMEM;
        if (curl_multi_setopt(loop->multi, CURLMOPT_SOCKETFUNCTION, socket_cb) != CURLM_OK ||
            curl_multi_setopt(loop->multi, CURLMOPT_SOCKETDATA, loop) != CURLM_OK ||
            curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, timer_cb) != CURLM_OK ||
            curl_multi_setopt(loop->multi, CURLMOPT_TIMERDATA, loop) != CURLM_OK)
                return -EIO;
        *ret = TAKE_PTR(loop);
        return 0;
}

CurlLoop *curl_loop_free(CurlLoop *loop) {
        if (!loop)
                return NULL;
        /* Removing handles makes curl re-arm its timer; on a finished loop that
         * cannot work and needs not: curl is going away. */
        if (loop->multi)
                (void) curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, NULL);
        /* Transfers still running belong to their owners: detach them so that
         * curl_multi_cleanup() leaves their easy handles alone. */
        while (loop->transfers)
                transfer_drop(loop, loop->transfers);
        if (loop->multi)
                curl_multi_cleanup(loop->multi);
        sd_event_source_disable_unref(loop->timer);
        sd_event_unref(loop->event);
        free(loop);
        return NULL;
}

CURLM *curl_loop_multi(CurlLoop *loop) {
        return loop->multi;
}

unsigned curl_loop_running(CurlLoop *loop) {
        return loop->n_running;
}

int curl_loop_add(CurlLoop *loop, CURL *easy, curl_loop_done_t done, void *userdata) {
        CurlTransfer *t;
        CURLMcode mc;

        if (!loop || !easy || !done)
                return -EINVAL;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        *t = (CurlTransfer){ .loop = loop, .easy = easy, .done = done, .userdata = userdata };
        if (curl_easy_setopt(easy, CURLOPT_PRIVATE, t) != CURLE_OK) {
                free(t);
                return -EIO;
        }
        mc = curl_multi_add_handle(loop->multi, easy);
        if (mc != CURLM_OK) {
                (void) curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
                free(t);
                return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
        }
        transfer_link(loop, t);
        return 0;
}

int curl_loop_cancel(CurlLoop *loop, CURL *easy) {
        CurlTransfer *t = NULL;

        (void) curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &t);
        if (!t || t->loop != loop)
                return -ENOENT;
        transfer_drop(loop, t);
        return 0;
}
