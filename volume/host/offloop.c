/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "systemd/macro.h"
#include "volume/host/offloop.h"

struct OffloopJob {
        pthread_mutex_t lock;
        bool finished;  /* the work returned */
        bool abandoned; /* freed by its owner while the work ran: the thread frees it */
        int pipe[2];    /* the thread writes one byte to [1] when the work returned */
        sd_event_source *source;
        offloop_work_t work;
        void *data;
        void (*data_free)(void *);
        offloop_done_t done;
        void *userdata;
        int result;
        char *error;
};

static void job_destroy(OffloopJob *j) {
        if (j->data_free)
                j->data_free(j->data);
        free(j->error);
        if (j->pipe[0] >= 0)
                close(j->pipe[0]);
        if (j->pipe[1] >= 0)
                close(j->pipe[1]);
        pthread_mutex_destroy(&j->lock);
        free(j);
}

static void *job_thread(void *p) {
        OffloopJob *j = p;
        char *error = NULL;
        int r = j->work(j->data, &error);
        bool abandoned;

        pthread_mutex_lock(&j->lock);
        j->result = r;
        j->error = error;
        j->finished = true;
        abandoned = j->abandoned;
        if (!abandoned)
                (void) write(j->pipe[1], "x", 1);
        pthread_mutex_unlock(&j->lock);
        if (abandoned)
                job_destroy(j);
        return NULL;
}

static int on_ready(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        OffloopJob *j = userdata;
        char *error;
        char c;

        (void) read(fd, &c, 1);
        j->source = sd_event_source_disable_unref(j->source);
        error = TAKE_PTR(j->error);
        j->done(j, j->result, error, j->userdata);
        return 0;
}

int offloop_start(sd_event *event, const char *description, offloop_work_t work, void *data,
                  void (*data_free)(void *), offloop_done_t done, void *userdata, OffloopJob **ret) {
        OffloopJob *j = calloc(1, sizeof *j);
        pthread_attr_t attr;
        pthread_t t;
        int r;

        if (!j) {
                if (data_free)
                        data_free(data);
                return -ENOMEM;
        }
        *j = (OffloopJob){ .pipe = { -1, -1 }, .work = work, .data = data, .data_free = data_free,
                           .done = done, .userdata = userdata };
        pthread_mutex_init(&j->lock, NULL);
        if (pipe2(j->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
                r = -errno;
                job_destroy(j);
                return r;
        }
        r = sd_event_add_io(event, &j->source, j->pipe[0], EPOLLIN, on_ready, j);
        if (r < 0) {
                job_destroy(j);
                return r;
        }
        (void) sd_event_source_set_description(j->source, description);
        r = -pthread_attr_init(&attr);
        if (r >= 0) {
                (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = -pthread_create(&t, &attr, job_thread, j);
                pthread_attr_destroy(&attr);
        }
        if (r < 0) {
                j->source = sd_event_source_disable_unref(j->source);
                job_destroy(j);
                return r;
        }
        *ret = j;
        return 0;
}

OffloopJob *offloop_free(OffloopJob *j) {
        bool running;

        if (!j)
                return NULL;
        j->source = sd_event_source_disable_unref(j->source);
        pthread_mutex_lock(&j->lock);
        running = !j->finished;
        j->abandoned = running;
        pthread_mutex_unlock(&j->lock);
        if (!running)
                job_destroy(j);
        return NULL;
}
