/* SPDX-License-Identifier: Apache-2.0 */
/* kubelet plugin registration (kubelet-facts §9): watch the registration
 * directory, and for each socket in it ask pluginregistration GetInfo, check
 * the answer, ask the driver GetPluginInfo and NodeGetInfo, and tell the
 * plugin NotifyRegistrationStatus.  A socket that goes away deregisters its
 * driver.  Failed attempts are retried with backoff while the socket exists,
 * as kubelet's reconciler does. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "csi/internal.h"
#include "csi/pluginregistration.pb-c.h"
#include "systemd/log.h"
#include "systemd/validate.h"

#define GET_INFO_PATH "/pluginregistration.Registration/GetInfo"
#define NOTIFY_PATH "/pluginregistration.Registration/NotifyRegistrationStatus"
#define CSI_PLUGIN_TYPE "CSIPlugin"
#define RETRY_FIRST_USEC (500 * USEC_PER_MSEC)
#define RETRY_MAX_USEC (2 * USEC_PER_MINUTE + 2 * USEC_PER_SEC) /* kubelet's 2m2s */
#define WATCH_MASK                                                                                         \
        (IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | \
         IN_EXCL_UNLINK)

typedef struct Plugin Plugin;

typedef struct Watch {
        int wd;
        char *path;
        struct Watch *next;
} Watch;

struct Plugin {
        CsiRegistration *reg;
        char *socket_path;
        GrpcChannel *reg_channel; /* the registration socket */
        GrpcChannel *csi_channel; /* the driver's endpoint, once known */
        GrpcCall *reg_call;       /* GetInfo or NotifyRegistrationStatus in flight */
        CsiCall *csi_call;        /* GetPluginInfo or NodeGetInfo in flight */
        char *name;
        char *version;
        bool registered;
        bool deferred;            /* the "registered" callback said -EAGAIN: not yet */
        sd_event_source *retry;
        uint64_t backoff_usec;
        uint64_t deferred_usec;   /* the deferred retries' backoff (csi/internal.h) */
        Plugin *next;
};

struct CsiRegistration {
        CsiClient *client;
        char *dir;
        int inotify_fd;
        sd_event_source *io;
        Watch *watches;
        Plugin *plugins;
};

/* ---- versions ------------------------------------------------------------- */

/* "1", "1.2", "v1.2.3": major.minor.patch with optional parts; 0 or -EINVAL. */
static int parse_version(const char *s, unsigned v[static 3]) {
        v[0] = v[1] = v[2] = 0;
        if (*s == 'v')
                s++;
        for (unsigned i = 0; i < 3; i++) {
                char *end;
                unsigned long n;
                if (*s < '0' || *s > '9')
                        return -EINVAL;
                errno = 0;
                n = strtoul(s, &end, 10);
                if (errno != 0 || n > UINT_MAX)
                        return -EINVAL;
                v[i] = (unsigned) n;
                s = end;
                if (*s == 0)
                        return 0;
                if (*s != '.')
                        return -EINVAL;
                s++;
        }
        return -EINVAL;
}

int csi_highest_supported_version(char *const *versions, size_t n, const char **ret) {
        const char *best = NULL;
        unsigned bv[3] = {};

        for (size_t i = 0; i < n; i++) {
                unsigned v[3];
                if (parse_version(versions[i], v) < 0 || v[0] != 1)
                        continue;
                if (!best || v[1] > bv[1] || (v[1] == bv[1] && v[2] > bv[2])) {
                        best = versions[i];
                        memcpy(bv, v, sizeof bv);
                }
        }
        if (!best)
                return -ENOENT;
        *ret = best;
        return 0;
}

/* ---- plugins -------------------------------------------------------------- */

static void plugin_reset(Plugin *p) {
        if (p->reg_call)
                grpc_call_cancel(p->reg_call);
        p->reg_call = NULL;
        if (p->csi_call)
                csi_call_cancel(p->csi_call);
        p->csi_call = NULL;
        p->retry = sd_event_source_disable_unref(p->retry);
        p->csi_channel = grpc_channel_unref(p->csi_channel);
        p->name = mfree_str(p->name);
        p->version = mfree_str(p->version);
}

static void plugin_deregister(Plugin *p) {
        CsiClient *c = p->reg->client;

        if (!p->registered)
                return;
        p->registered = false;
        if (csi_client_remove_registered(c, p->name, p->socket_path)) {
                log_fields(LOG_INFO, &(LogFields){ .driver = p->name },
                           "CSI driver %s deregistered (socket %s removed).", p->name, p->socket_path);
                if (c->registration_cb.deregistered)
                        c->registration_cb.deregistered(c, p->name, p->socket_path, c->registration_userdata);
        }
}

static Plugin *plugin_free(Plugin *p) {
        if (!p)
                return NULL;
        plugin_deregister(p);
        plugin_reset(p);
        grpc_channel_unref(p->reg_channel);
        free(p->socket_path);
        free(p);
        return NULL;
}

static void plugin_begin(Plugin *p);

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Plugin *p = userdata;
        p->retry = sd_event_source_disable_unref(p->retry);
        plugin_begin(p);
        return 0;
}

static void on_notified(GrpcCall *g, const GrpcResult *r, void *userdata) {
        Plugin *p = userdata;
        p->reg_call = NULL;
        if (r->code != CSI_CODE_OK)
                log_debug("NotifyRegistrationStatus to %s failed: %s: %s", p->socket_path, csi_code_name(r->code),
                          r->message);
}

static void notify(Plugin *p, bool registered, const char *error) {
        CsiRegistration *reg = p->reg;
        Pluginregistration__RegistrationStatus st = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
        uint8_t buf[1024 + 64];
        char msg[1024];
        size_t n;
        int r;

        /* Truncated: a plugin needs the gist, and the buffer stays on the stack. */
        snprintf(msg, sizeof msg, "%s", strempty(error));
        st.plugin_registered = registered;
        st.error = msg;
        n = pluginregistration__registration_status__pack(&st, buf);
        if (p->reg_call)
                grpc_call_cancel(p->reg_call);
        p->reg_call = NULL;
        r = grpc_channel_call(p->reg_channel, NOTIFY_PATH, buf, n, reg->client->registration_timeout_usec,
                              on_notified, p, &p->reg_call);
        if (r < 0)
                log_warning_errno(r, "Failed to send NotifyRegistrationStatus to %s: %m", p->socket_path);
}

/* Ends this attempt: tells the plugin when it got far enough to be told, and
 * tries again later. */
static void plugin_fail(Plugin *p, bool tell_plugin, const char *format, ...) _printf_(3, 4);
static void plugin_fail(Plugin *p, bool tell_plugin, const char *format, ...) {
        CsiClient *c = p->reg->client;
        char reason[1024];
        va_list ap;
        int r;

        va_start(ap, format);
        vsnprintf(reason, sizeof reason, format, ap);
        va_end(ap);

        log_fields(LOG_WARNING, &(LogFields){ .driver = p->name }, "Plugin registration of %s failed: %s",
                   p->socket_path, reason);
        if (c->registration_cb.failed)
                c->registration_cb.failed(c, p->socket_path, reason, c->registration_userdata);
        if (tell_plugin)
                notify(p, false, reason);

        p->backoff_usec = p->backoff_usec ? MIN(p->backoff_usec * 2, RETRY_MAX_USEC) : RETRY_FIRST_USEC;
        p->retry = sd_event_source_disable_unref(p->retry);
        r = sd_event_add_time_relative(c->event, &p->retry, CLOCK_MONOTONIC, p->backoff_usec, USEC_PER_MSEC,
                                       on_retry, p);
        if (r < 0)
                log_warning_errno(r, "Failed to schedule a retry of %s: %m", p->socket_path);
}

static void on_node_info(const CsiStatus *st, const CsiNodeInfo *info, void *userdata) {
        Plugin *p = userdata;
        CsiClient *c = p->reg->client;
        int r;

        p->csi_call = NULL;
        if (st->code != CSI_CODE_OK)
                return plugin_fail(p, true,
                                   "RegisterPlugin error -- plugin registration failed with err: NodeGetInfo: rpc "
                                   "error: code = %s desc = %s",
                                   csi_code_name(st->code), st->message);
        if (isempty(info->node_id))
                return plugin_fail(p, true,
                                   "RegisterPlugin error -- plugin registration failed with err: error updating "
                                   "Node object with CSI driver node info: node ID is empty");

        r = csi_client_add_registered(c, p->name, p->csi_channel, p->socket_path, p->version);
        if (r < 0)
                return plugin_fail(p, true, "RegisterPlugin error -- plugin registration failed with err: %s",
                                   strerror(-r));
        p->registered = true;
        if (c->registration_cb.registered) {
                c->refusal_reason = mfree_str(c->refusal_reason);
                r = c->registration_cb.registered(c,
                                                  &(CsiRegisteredDriver){
                                                          .name = p->name,
                                                          .endpoint_path = grpc_channel_socket_path(p->csi_channel),
                                                          .registration_socket = p->socket_path,
                                                          .version = p->version,
                                                          .node_info = info,
                                                  },
                                                  c->registration_userdata);
                if (r == -EAGAIN) {
                        p->registered = false;
                        (void) csi_client_remove_registered(c, p->name, p->socket_path);
                        c->refusal_reason = mfree_str(c->refusal_reason);
                        p->deferred = true;
                        p->retry = sd_event_source_disable_unref(p->retry);
                        r = sd_event_add_time_relative(c->event, &p->retry, CLOCK_MONOTONIC,
                                                       csi_deferred_backoff_next(&p->deferred_usec), USEC_PER_MSEC,
                                                       on_retry, p);
                        if (r < 0)
                                log_warning_errno(r, "Failed to schedule a retry of %s: %m", p->socket_path);
                        log_debug("Registration of %s deferred: the node is not known yet; asking again once it is "
                                  "listed, or in %.0f s", p->name, (double) p->deferred_usec / USEC_PER_SEC);
                        return;
                }
                if (r < 0) {
                        p->registered = false;
                        (void) csi_client_remove_registered(c, p->name, p->socket_path);
                        _cleanup_free_ char *reason = TAKE_PTR(c->refusal_reason);
                        return plugin_fail(p, true,
                                           "RegisterPlugin error -- plugin registration failed with err: %s",
                                           reason ?: strerror(-r));
                }
        }
        p->backoff_usec = p->deferred_usec = 0;
        log_fields(LOG_INFO, &(LogFields){ .driver = p->name },
                   "CSI driver %s registered: endpoint %s, version %s, node ID %s.", p->name,
                   grpc_channel_socket_path(p->csi_channel), p->version, info->node_id);
        notify(p, true, NULL);
}

static void on_plugin_info(const CsiStatus *st, const CsiPluginInfo *info, void *userdata) {
        Plugin *p = userdata;
        int r;

        p->csi_call = NULL;
        if (st->code != CSI_CODE_OK)
                return plugin_fail(p, true,
                                   "RegisterPlugin error -- plugin validation failed with err: GetPluginInfo: rpc "
                                   "error: code = %s desc = %s",
                                   csi_code_name(st->code), st->message);
        if (!streq(info->name, p->name))
                return plugin_fail(p, true,
                                   "RegisterPlugin error -- plugin validation failed with err: the driver at %s "
                                   "calls itself \"%s\", not \"%s\"",
                                   grpc_channel_socket_path(p->csi_channel), info->name, p->name);
        r = csi_node_get_info_on(p->reg->client, p->csi_channel, p->name, on_node_info, p, &p->csi_call);
        if (r < 0)
                plugin_fail(p, true, "RegisterPlugin error -- plugin registration failed with err: %s", strerror(-r));
}

static Plugin *find_registered_elsewhere(CsiRegistration *reg, const Plugin *self, const char *name) {
        for (Plugin *q = reg->plugins; q; q = q->next)
                if (q != self && q->registered && streq(q->name, name))
                        return q;
        return NULL;
}

static void on_get_info(GrpcCall *g, const GrpcResult *res, void *userdata) {
        Plugin *p = userdata;
        CsiClient *c = p->reg->client;
        Pluginregistration__PluginInfo *info;
        const char *version, *endpoint;
        Plugin *other;
        int r;

        p->reg_call = NULL;
        if (res->code != CSI_CODE_OK)
                /* Nobody to tell: the plugin did not answer. */
                return plugin_fail(p, false, "GetInfo failed: rpc error: code = %s desc = %s",
                                   csi_code_name(res->code), res->message);
        info = pluginregistration__plugin_info__unpack(NULL, res->size, res->data);
        if (!info)
                return plugin_fail(p, false, "GetInfo answered an invalid PluginInfo");

        if (!streq(strempty(info->type), CSI_PLUGIN_TYPE)) {
                plugin_fail(p, true,
                            "RegisterPlugin error -- no handler registered for plugin type: %s at socket path: %s",
                            strempty(info->type), p->socket_path);
                goto finish;
        }
        if (validate_csi_driver_name(info->name) < 0) {
                plugin_fail(p, true, "RegisterPlugin error -- plugin validation failed with err: invalid CSI driver name \"%s\"",
                            strempty(info->name));
                goto finish;
        }
        if (info->n_supported_versions == 0 ||
            csi_highest_supported_version(info->supported_versions, info->n_supported_versions, &version) < 0) {
                plugin_fail(p, true,
                            "RegisterPlugin error -- plugin validation failed with err: none of the versions "
                            "supplied by %s (%zu of them) is supported; kvolumed supports 1.x",
                            info->name, info->n_supported_versions);
                goto finish;
        }
        other = find_registered_elsewhere(p->reg, p, info->name);
        if (other) {
                plugin_fail(p, true,
                            "RegisterPlugin error -- plugin validation failed with err: a CSI driver named %s is "
                            "already registered through %s",
                            info->name, other->socket_path);
                goto finish;
        }

        /* An empty endpoint means the registration socket serves CSI too. */
        endpoint = isempty(info->endpoint) ? p->socket_path : info->endpoint;
        if (strncmp(endpoint, "unix://", 7) == 0 && unix_endpoint_path(endpoint, &endpoint) < 0)
                endpoint = NULL;
        if (!endpoint || endpoint[0] != '/') {
                plugin_fail(p, true, "RegisterPlugin error -- plugin validation failed with err: bad endpoint \"%s\"",
                            strempty(info->endpoint));
                goto finish;
        }

        plugin_reset(p);
        p->name = strdup(info->name);
        p->version = strdup(version);
        if (!p->name || !p->version) {
                plugin_fail(p, true, "RegisterPlugin error -- out of memory");
                goto finish;
        }
        r = grpc_channel_new(c->transport, endpoint, c->max_parallel, &p->csi_channel);
        if (r >= 0)
                r = csi_get_plugin_info_on(c, p->csi_channel, p->name, on_plugin_info, p, &p->csi_call);
        if (r < 0)
                plugin_fail(p, true, "RegisterPlugin error -- plugin registration failed with err: %s", strerror(-r));
finish:
        pluginregistration__plugin_info__free_unpacked(info, NULL);
}

static void plugin_begin(Plugin *p) {
        Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
        uint8_t buf[16];
        size_t n;
        int r;

        plugin_deregister(p);
        plugin_reset(p);
        p->deferred = false;
        n = pluginregistration__info_request__pack(&req, buf);
        r = grpc_channel_call(p->reg_channel, GET_INFO_PATH, buf, n, p->reg->client->registration_timeout_usec,
                              on_get_info, p, &p->reg_call);
        if (r < 0)
                plugin_fail(p, false, "cannot call GetInfo: %s", strerror(-r));
}

static Plugin *plugin_find(CsiRegistration *reg, const char *path) {
        for (Plugin *p = reg->plugins; p; p = p->next)
                if (streq(p->socket_path, path))
                        return p;
        return NULL;
}

static void plugin_remove(CsiRegistration *reg, Plugin *p) {
        for (Plugin **q = &reg->plugins; *q; q = &(*q)->next)
                if (*q == p) {
                        *q = p->next;
                        break;
                }
        plugin_free(p);
}

/* A socket appeared (or was replaced: kubelet re-registers on a new timestamp). */
static int plugin_add(CsiRegistration *reg, const char *path) {
        Plugin *p = plugin_find(reg, path);
        int r;

        if (p) {
                plugin_begin(p);
                return 0;
        }
        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->reg = reg;
        p->socket_path = strdup(path);
        if (!p->socket_path) {
                free(p);
                return -ENOMEM;
        }
        /* One registration exchange at a time per plugin is all kubelet does. */
        r = grpc_channel_new(reg->client->transport, path, 1, &p->reg_channel);
        if (r < 0) {
                plugin_free(p);
                return r;
        }
        p->next = reg->plugins;
        reg->plugins = p;
        log_debug("Plugin registration socket %s found.", path);
        plugin_begin(p);
        return 0;
}

/* Removes every plugin at "path" or below it (a directory went away). */
static void plugins_remove_under(CsiRegistration *reg, const char *path) {
        size_t len = strlen(path);
        Plugin *p = reg->plugins;

        while (p) {
                Plugin *next = p->next;
                if (streq(p->socket_path, path) || (strncmp(p->socket_path, path, len) == 0 && p->socket_path[len] == '/'))
                        plugin_remove(reg, p);
                p = next;
        }
}

/* ---- the directory watch ----------------------------------------------------- */

static Watch *watch_by_wd(CsiRegistration *reg, int wd) {
        for (Watch *w = reg->watches; w; w = w->next)
                if (w->wd == wd)
                        return w;
        return NULL;
}

static void watch_drop(CsiRegistration *reg, int wd) {
        for (Watch **w = &reg->watches; *w; w = &(*w)->next)
                if ((*w)->wd == wd) {
                        Watch *old = *w;
                        *w = old->next;
                        free(old->path);
                        free(old);
                        return;
                }
}

static int scan_dir(CsiRegistration *reg, const char *path, unsigned depth);

static int watch_dir(CsiRegistration *reg, const char *path, unsigned depth) {
        Watch *w;
        int wd;

        wd = inotify_add_watch(reg->inotify_fd, path, WATCH_MASK);
        if (wd < 0)
                return log_warning_errno(errno, "Failed to watch %s: %m", path);
        w = watch_by_wd(reg, wd);
        if (!w) {
                w = calloc(1, sizeof *w);
                if (!w)
                        return -ENOMEM;
                w->wd = wd;
                w->next = reg->watches;
                reg->watches = w;
        }
        if (free_and_strdup(&w->path, path) < 0)
                return -ENOMEM;
        /* Watch first, then list: a socket created in between is seen twice at
         * worst, and plugin_add copes with that. */
        return scan_dir(reg, path, depth);
}

/* Looks at one entry of a watched directory. */
static void consider(CsiRegistration *reg, const char *dir, const char *name, unsigned depth) {
        _cleanup_free_ char *path = NULL;
        struct stat st;

        if (name[0] == '.')
                return;
        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return;
        if (lstat(path, &st) < 0)
                return;
        if (S_ISDIR(st.st_mode)) {
                if (depth < 16) /* kubelet has no limit; a loop of bind mounts should not take us down */
                        (void) watch_dir(reg, path, depth + 1);
        } else if (S_ISSOCK(st.st_mode))
                (void) plugin_add(reg, path);
}

static int scan_dir(CsiRegistration *reg, const char *path, unsigned depth) {
        DIR *d = opendir(path);
        struct dirent *de;

        if (!d)
                return log_warning_errno(errno, "Failed to list %s: %m", path);
        while ((de = readdir(d)))
                consider(reg, path, de->d_name, depth);
        closedir(d);
        return 0;
}

static unsigned depth_of(CsiRegistration *reg, const char *path) {
        unsigned n = 0;
        for (const char *s = path + strlen(reg->dir); *s; s++)
                n += *s == '/';
        return n;
}

static void on_event(const struct inotify_event *ev, void *userdata) {
        CsiRegistration *reg = userdata;
        Watch *w = watch_by_wd(reg, ev->wd);
        _cleanup_free_ char *path = NULL;

        if (ev->mask & IN_Q_OVERFLOW) {
                /* Events were lost: look at everything again. */
                log_warning("inotify queue overflow on %s; rescanning.", reg->dir);
                (void) scan_dir(reg, reg->dir, 0);
                return;
        }
        if (!w)
                return;
        if (ev->mask & IN_IGNORED) {
                watch_drop(reg, ev->wd);
                return;
        }
        if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
                plugins_remove_under(reg, w->path);
                return;
        }
        if (ev->len == 0 || ev->name[0] == '.')
                return;
        if (asprintf(&path, "%s/%s", w->path, ev->name) < 0)
                return;
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
                plugins_remove_under(reg, path);
        else if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                consider(reg, w->path, ev->name, depth_of(reg, w->path));
}

static int on_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        csi_inotify_drain(fd, on_event, userdata);
        return 0;
}

static int mkdir_p(const char *path, mode_t mode) {
        _cleanup_free_ char *copy = strdup(path);

        if (!copy)
                return -ENOMEM;
        for (char *s = copy + 1; *s; s++)
                if (*s == '/') {
                        *s = 0;
                        if (mkdir(copy, mode) < 0 && errno != EEXIST)
                                return -errno;
                        *s = '/';
                }
        if (mkdir(copy, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int csi_registration_new(CsiClient *c, const char *dir, CsiRegistration **ret) {
        _cleanup_(csi_registration_freep) CsiRegistration *reg = NULL;
        int r;

        reg = calloc(1, sizeof *reg);
        if (!reg)
                return -ENOMEM;
        reg->client = c;
        reg->inotify_fd = -1;
        reg->dir = strdup(dir);
        if (!reg->dir)
                return -ENOMEM;
        r = mkdir_p(dir, 0755);
        if (r < 0)
                return log_error_errno(r, "Failed to create the plugin registration directory %s: %m", dir);
        reg->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (reg->inotify_fd < 0)
                return log_error_errno(errno, "Failed to create an inotify instance: %m");
        r = sd_event_add_io(c->event, &reg->io, reg->inotify_fd, EPOLLIN, on_inotify, reg);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(reg->io, "csi-plugin-registration");
        r = watch_dir(reg, dir, 0);
        if (r < 0)
                return r;
        log_info("Watching %s for CSI plugin registration sockets.", dir);
        *ret = TAKE_PTR(reg);
        return 0;
}

void csi_registration_retry_deferred(CsiRegistration *reg) {
        for (Plugin *p = reg->plugins; p; p = p->next)
                if (p->deferred)
                        plugin_begin(p);
}

CsiRegistration *csi_registration_free(CsiRegistration *reg) {
        if (!reg)
                return NULL;
        while (reg->plugins) {
                Plugin *p = reg->plugins;
                reg->plugins = p->next;
                /* Stopping is not a deregistration: the drivers are still there. */
                p->registered = false;
                plugin_free(p);
        }
        while (reg->watches)
                watch_drop(reg, reg->watches->wd);
        sd_event_source_disable_unref(reg->io);
        if (reg->inotify_fd >= 0)
                close(reg->inotify_fd);
        free(reg->dir);
        free(reg);
        return NULL;
}
