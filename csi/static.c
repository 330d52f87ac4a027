/* SPDX-License-Identifier: Apache-2.0 */
/* Statically configured drivers ([driver "NAME"] endpoint = unix://...).  No
 * plugin registration says when such a driver comes or goes, so kvolumed asks
 * it NodeGetInfo itself and hands the answer to the same "registered"
 * callback as a registered driver's, so that it reaches CSINode, the nodeid
 * annotation and the Node's topology labels alike.
 *
 * When to ask: at start; whenever the driver's socket is created again; and
 * after a failed attempt, with backoff (500 ms doubling to 30 s) while the
 * driver is not up.  The socket's creation is seen with inotify on its
 * directory: a driver that restarts unlinks and binds its socket anew, which
 * is the one sign that it may answer differently (a new node ID) even when no
 * volume call is made meanwhile.  Watching the calls of csi/client.c for
 * failures instead would notice a restart only when a volume operation
 * happened to fail, and a dead socket only after a call's timeout.
 *
 * What the journal says of it: a socket that is not there is one line when
 * it goes missing (in the socket's words: the path and "No such file or
 * directory") and one when it is back; meanwhile nothing is asked (the
 * directory's watch says when it is created; a missing directory is polled,
 * quietly).  A socket that is there but does not answer is one notice per
 * new reason, the retries in between at debug level: it was a notice, and
 * the failed call's warning, every 30 s for ever (~5,760 lines a day). */
#include <stdarg.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "csi/internal.h"
#include "systemd/log.h"

#define PROBE_FIRST_USEC (500 * USEC_PER_MSEC)
#define PROBE_MAX_USEC (30 * USEC_PER_SEC)
#define STATIC_WATCH_MASK (IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF)

typedef struct StaticProbe StaticProbe;

struct StaticProbe {
        CsiStaticDrivers *owner;
        char *name;
        GrpcChannel *channel;
        char *dir;      /* the socket's directory, watched */
        char *basename; /* the socket's name in it */
        int wd;         /* -1: not watched (the directory is missing) */
        CsiCall *call;  /* NodeGetInfo in flight */
        sd_event_source *retry;
        uint64_t backoff_usec;
        bool deferred;  /* the callback said -EAGAIN: not yet */
        uint64_t deferred_usec; /* the deferred retries' backoff (csi/internal.h) */
        bool missing;   /* the socket is not there: said once */
        char *told;     /* the last failure said at notice level; NULL after a success */
        StaticProbe *next;
};

struct CsiStaticDrivers {
        CsiClient *client;
        int inotify_fd;
        sd_event_source *io;
        StaticProbe *probes;
};

static void probe_begin(StaticProbe *p);

static void probe_cancel(StaticProbe *p) {
        if (p->call)
                csi_call_cancel(p->call);
        p->call = NULL;
        p->retry = sd_event_source_disable_unref(p->retry);
}

static StaticProbe *probe_free(StaticProbe *p) {
        if (!p)
                return NULL;
        probe_cancel(p);
        grpc_channel_unref(p->channel);
        free(p->told);
        free(p->name);
        free(p->dir);
        free(p->basename);
        free(p);
        return NULL;
}

static void probe_watch(StaticProbe *p) {
        CsiStaticDrivers *s = p->owner;

        if (p->wd >= 0)
                return;
        /* Several drivers may share a directory: inotify hands back the same wd. */
        p->wd = inotify_add_watch(s->inotify_fd, p->dir, STATIC_WATCH_MASK);
        if (p->wd < 0)
                log_fields(LOG_DEBUG, &(LogFields){ .driver = p->name },
                           "Cannot watch %s for driver %s yet (%s); asking it again with backoff", p->dir, p->name,
                           strerror(errno));
}

static int on_retry(sd_event_source *source, uint64_t usec, void *userdata) {
        StaticProbe *p = userdata;
        p->retry = sd_event_source_disable_unref(p->retry);
        probe_begin(p);
        return 0;
}

static void probe_failed(StaticProbe *p, const char *format, ...) _printf_(2, 3);
static void probe_failed(StaticProbe *p, const char *format, ...) {
        CsiClient *c = p->owner->client;
        char reason[1024];
        va_list ap;
        int r;

        va_start(ap, format);
        vsnprintf(reason, sizeof reason, format, ap);
        va_end(ap);

        LogFields f = { .driver = p->name, .csi_method = "NodeGetInfo" };
        bool news = !streq_ptr(p->told, reason);

        p->backoff_usec = p->backoff_usec ? MIN(p->backoff_usec * 2, PROBE_MAX_USEC) : PROBE_FIRST_USEC;
        log_fields(news ? LOG_NOTICE : LOG_DEBUG, &f,
                   "Statically configured CSI driver %s is not ready (%s); asking again in %.1f s%s", p->name,
                   reason, (double) p->backoff_usec / USEC_PER_SEC,
                   news ? ", and saying so again only if the reason changes" : "");
        if (news)
                (void) free_and_strdup(&p->told, reason);
        if (c->registration_cb.failed)
                c->registration_cb.failed(c, grpc_channel_socket_path(p->channel), reason, c->registration_userdata);
        p->retry = sd_event_source_disable_unref(p->retry);
        r = sd_event_add_time_relative(c->event, &p->retry, CLOCK_MONOTONIC, p->backoff_usec, USEC_PER_MSEC,
                                       on_retry, p);
        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &(LogFields){ .driver = p->name },
                                 "Failed to schedule NodeGetInfo of driver %s again: %m", p->name);
}

static void on_node_info(const CsiStatus *st, const CsiNodeInfo *info, void *userdata) {
        StaticProbe *p = userdata;
        CsiClient *c = p->owner->client;
        int r;

        p->call = NULL;
        if (st->code != CSI_CODE_OK)
                return probe_failed(p, "NodeGetInfo: rpc error: code = %s desc = %s", csi_code_name(st->code),
                                    st->message);
        if (isempty(info->node_id))
                return probe_failed(p, "NodeGetInfo answered an empty node ID");
        if (c->registration_cb.registered) {
                c->refusal_reason = mfree_str(c->refusal_reason);
                r = c->registration_cb.registered(c,
                                                  &(CsiRegisteredDriver){
                                                          .name = p->name,
                                                          .endpoint_path = grpc_channel_socket_path(p->channel),
                                                          .registration_socket = NULL,
                                                          .version = NULL,
                                                          .node_info = info,
                                                  },
                                                  c->registration_userdata);
                if (r == -EAGAIN) {
                        c->refusal_reason = mfree_str(c->refusal_reason);
                        p->deferred = true;
                        r = sd_event_add_time_relative(c->event, &p->retry, CLOCK_MONOTONIC,
                                                       csi_deferred_backoff_next(&p->deferred_usec), USEC_PER_MSEC,
                                                       on_retry, p);
                        if (r < 0)
                                log_warning_errno(r, "Failed to schedule NodeGetInfo of %s again: %m", p->name);
                        return;
                }
                if (r < 0) {
                        _cleanup_free_ char *reason = TAKE_PTR(c->refusal_reason);
                        return probe_failed(p, "recording it on the node failed: %s", reason ?: strerror(-r));
                }
        }
        p->backoff_usec = p->deferred_usec = 0;
        p->told = mfree_str(p->told);
        log_fields(LOG_INFO, &(LogFields){ .driver = p->name },
                   "Statically configured CSI driver %s is ready: endpoint %s, node ID %s.", p->name,
                   grpc_channel_socket_path(p->channel), info->node_id);
}

/* Whether the socket is there, saying so when that changes.  A stat of a
 * path in the driver's socket directory: a local directory, as the
 * connect() that would follow is. */
static bool probe_socket_present(StaticProbe *p) {
        const char *path = grpc_channel_socket_path(p->channel);
        LogFields f = { .driver = p->name };
        struct stat st;
        int r, e;

        if (stat(path, &st) >= 0) {
                if (p->missing)
                        log_fields(LOG_INFO, &f, "Socket %s of CSI driver %s is there now; asking NodeGetInfo",
                                   path, p->name);
                p->missing = false;
                return true;
        }
        e = errno;
        if (!p->missing)
                log_fields(LOG_NOTICE, &f,
                           "Socket %s of statically configured CSI driver %s: %s. Its volumes wait until the "
                           "driver creates it (check that the driver runs on this node and that [driver \"%s\"] "
                           "endpoint is its socket); said again when it is there",
                           path, p->name, strerror(e), p->name);
        p->missing = true;
        p->told = mfree_str(p->told);
        if (p->wd >= 0)
                return false; /* its creation is an inotify event */
        /* Its directory is not there (or not watchable): look again, quietly. */
        p->backoff_usec = p->backoff_usec ? MIN(p->backoff_usec * 2, PROBE_MAX_USEC) : PROBE_FIRST_USEC;
        r = sd_event_add_time_relative(p->owner->client->event, &p->retry, CLOCK_MONOTONIC, p->backoff_usec,
                                       USEC_PER_MSEC, on_retry, p);
        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &f, "Failed to schedule a look for the socket of driver %s: %m",
                                 p->name);
        return false;
}

static void probe_begin(StaticProbe *p) {
        int r;

        probe_cancel(p);
        p->deferred = false;
        probe_watch(p);
        if (!probe_socket_present(p))
                return;
        r = csi_node_get_info_on(p->owner->client, p->channel, p->name, on_node_info, p, &p->call);
        if (r < 0)
                probe_failed(p, "cannot call NodeGetInfo: %s", strerror(-r));
        else
                csi_call_set_quiet(p->call); /* probe_failed() says what is news */
}

/* The socket was created again: a new driver process, whatever came before. */
static void probe_socket_appeared(StaticProbe *p) {
        if (!p->missing)
                log_fields(LOG_INFO, &(LogFields){ .driver = p->name },
                           "Socket %s of CSI driver %s created again; asking NodeGetInfo",
                           grpc_channel_socket_path(p->channel), p->name);
        p->backoff_usec = 0;
        probe_begin(p);
}

static void probe_socket_gone(StaticProbe *p) {
        /* Its volumes fail meanwhile and back off; the CSINode entry stays:
         * the driver is configured here, and a restart is not a removal. */
        probe_cancel(p);
        p->backoff_usec = 0;
        (void) probe_socket_present(p);
}

static void on_event(const struct inotify_event *ev, void *userdata) {
        CsiStaticDrivers *s = userdata;

        for (StaticProbe *p = s->probes; p; p = p->next) {
                if (ev->mask & IN_Q_OVERFLOW) {
                        /* Events were lost: ask every driver again. */
                        p->backoff_usec = 0;
                        probe_begin(p);
                        continue;
                }
                if (p->wd != ev->wd)
                        continue;
                if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
                        /* The directory went: poll until it is back. */
                        if (ev->mask & IN_IGNORED)
                                p->wd = -1;
                        if (!p->retry && !p->call)
                                probe_begin(p); /* says the socket is missing, once */
                        continue;
                }
                if (ev->len == 0 || !streq(ev->name, p->basename))
                        continue;
                if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                        probe_socket_appeared(p);
                else if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
                        probe_socket_gone(p);
        }
}

static int on_inotify(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        csi_inotify_drain(fd, on_event, userdata);
        return 0;
}

int csi_static_drivers_start(CsiClient *c, CsiStaticDrivers **ret) {
        _cleanup_(csi_static_drivers_freep) CsiStaticDrivers *s = NULL;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->client = c;
        s->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (s->inotify_fd < 0)
                return log_error_errno(errno, "Failed to create an inotify instance: %m");
        r = sd_event_add_io(c->event, &s->io, s->inotify_fd, EPOLLIN, on_inotify, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(s->io, "csi-static-drivers");

        for (CsiDriver *d = c->static_drivers; d; d = d->next) {
                const char *path = grpc_channel_socket_path(d->channel);
                const char *slash = strrchr(path, '/');
                StaticProbe *p = calloc(1, sizeof *p);

                if (!p)
                        return -ENOMEM;
                p->owner = s;
                p->wd = -1;
                p->next = s->probes;
                s->probes = p;
                p->channel = grpc_channel_ref(d->channel);
                p->name = strdup(d->name);
                p->dir = slash == path ? strdup("/") : strndup(path, slash - path);
                p->basename = strdup(slash + 1);
                if (!p->name || !p->dir || !p->basename)
                        return -ENOMEM;
        }
        /* Asked only once every probe exists: a callback may look at the others. */
        for (StaticProbe *p = s->probes; p; p = p->next)
                probe_begin(p);
        *ret = TAKE_PTR(s);
        return 0;
}

CsiStaticDrivers *csi_static_drivers_free(CsiStaticDrivers *s) {
        if (!s)
                return NULL;
        while (s->probes) {
                StaticProbe *p = s->probes;
                s->probes = p->next;
                probe_free(p);
        }
        sd_event_source_disable_unref(s->io);
        if (s->inotify_fd >= 0)
                close(s->inotify_fd);
        free(s);
        return NULL;
}

void csi_static_drivers_retry_deferred(CsiStaticDrivers *s) {
        for (StaticProbe *p = s->probes; p; p = p->next)
                if (p->deferred)
                        probe_begin(p);
}
