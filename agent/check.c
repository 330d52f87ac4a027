/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/apisocket.h"
#include "agent/check.h"
#include "k8s/auth.h"
#include "systemd/curl-loop.h"
#include "systemd/validate.h"

/* A check gives up after this long: the client's own default is a minute. */
#define ONLINE_TIMEOUT_USEC (15 * USEC_PER_SEC)

static const char *strna(const char *s) {
        return s ?: "n/a";
}

int check_resolve_auth(const Config *c, K8sAuth **ret, char **ret_error) {
        return k8s_auth_resolve(&(K8sAuthSettings){ .kubeconfig = c->kubeconfig,
                                                    .server = c->server,
                                                    .token_file = c->token_file,
                                                    .certificate_authority = c->certificate_authority,
                                                    .client_certificate = c->client_certificate,
                                                    .client_key = c->client_key,
                                                    .service_account_dir = getenv("KVOLUMED_SERVICE_ACCOUNT_DIR") },
                                ret, ret_error);
}

int check_credentials(const Config *c, char **ret_error) {
        _cleanup_(k8s_auth_freep) K8sAuth *auth = NULL;
        _cleanup_free_ char *error = NULL, *where = NULL;
        const char *key = NULL;
        int r;

        r = check_resolve_auth(c, &auth, &error);
        if (r == -ENOMEM)
                return r;
        if (r < 0 && c->kubeconfig) {
                where = config_key_location(c, "kubernetes", "kubeconfig");
                if (!where)
                        return -ENOMEM;
                if (r == -ENOENT)
                        /* The shipped default names a file that nothing installs: say what it is. */
                        r = asprintf(ret_error,
                                     "%s: [kubernetes] kubeconfig: %s does not exist. It is the kubeconfig "
                                     "kvolumed uses to reach the API server as this node (user "
                                     "system:node:%s): point kubeconfig at the node's kubelet kubeconfig (e.g. "
                                     "/etc/kubernetes/kubelet.conf), copy it there, or set server and its "
                                     "credentials in [kubernetes] instead",
                                     where, c->kubeconfig, c->node_name);
                else
                        r = asprintf(ret_error, "%s: [kubernetes] kubeconfig: %s", where,
                                     error ? error : strerror(-r));
                return r < 0 ? -ENOMEM : -EINVAL;
        }
        if (r < 0) {
                where = config_key_location(c, "kubernetes", c->server ? "server" : "kubeconfig");
                if (!where)
                        return -ENOMEM;
                r = asprintf(ret_error, "%s: [kubernetes]: %s", where, error ? error : strerror(-r));
                return r < 0 ? -ENOMEM : -EINVAL;
        }

        r = k8s_auth_check_credentials(auth, &key, &error);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                /* A kubeconfig's file is named by the kubeconfig, which is named by kvolumed.conf. */
                where = config_key_location(c, "kubernetes", auth->kubeconfig ? "kubeconfig" : key);
                if (!where)
                        return -ENOMEM;
                if (auth->kubeconfig)
                        r = asprintf(ret_error, "%s: [kubernetes] kubeconfig %s: %s", where, auth->kubeconfig,
                                     error);
                else
                        r = asprintf(ret_error, "%s: [kubernetes] %s", where, error);
                return r < 0 ? -ENOMEM : -EINVAL;
        }
        return 0;
}

void check_print_warnings(const Config *c, FILE *out) {
        struct stat st;

        if (stat(c->root_dir, &st) < 0)
                fprintf(out, "warning: [agent] root-dir %s: %m; kvolumed creates it at start (its parent must "
                        "exist), but a root-dir shared with a kubelet is normally there already\n",
                        c->root_dir);
        for (size_t i = 0; i < c->n_drivers; i++) {
                const char *path = NULL;
                if (unix_endpoint_path(c->drivers[i].endpoint, &path) < 0 || !path)
                        continue;
                if (stat(path, &st) < 0)
                        fprintf(out, "warning: [driver \"%s\"] endpoint %s: %m; kvolumed waits for the driver "
                                "to create its socket\n", c->drivers[i].name, path);
                else if (!S_ISSOCK(st.st_mode))
                        fprintf(out, "warning: [driver \"%s\"] endpoint %s is not a socket; kvolumed waits for "
                                "the driver to create one\n", c->drivers[i].name, path);
        }
}

int check_api_socket(const Config *c, char **ret_error) {
        _cleanup_free_ char *problem = NULL, *where = NULL;
        int fd;

        if (!c->api_socket)
                return 0;
        fd = api_socket_open_dir(c->api_socket, false, &problem);
        if (fd >= 0) {
                (void) close(fd);
                return 0;
        }
        if (fd == -ENOENT || fd == -EACCES || fd == -ENOMEM)
                return fd == -ENOMEM ? fd : 0;
        where = config_key_location(c, "api", "socket");
        if (asprintf(ret_error, "%s: %s", strempty(where), problem ?: strerror(-fd)) < 0)
                return -ENOMEM;
        return fd;
}

char *check_describe_credential(const Config *c) {
        char *text = NULL;
        int r;

        if (c->kubeconfig)
                r = asprintf(&text, "[kubernetes] kubeconfig %s", c->kubeconfig);
        else if (c->server && c->client_certificate)
                r = asprintf(&text, "[kubernetes] client-certificate %s", c->client_certificate);
        else if (c->server && c->token_file)
                r = asprintf(&text, "[kubernetes] token-file %s", c->token_file);
        else if (c->server)
                r = asprintf(&text, "[kubernetes] server %s without credentials", c->server);
        else
                r = asprintf(&text, "the service account of the pod kvolumed runs in");
        return r < 0 ? NULL : text;
}

int check_identity(const Config *c, const K8sIdentity *id, char **ret_error) {
        _cleanup_free_ char *credential = NULL, *where = NULL, *node = NULL, *user = NULL;
        const char *name = k8s_identity_node_name(id);

        if (!name || streq(name, c->node_name))
                return 0;
        credential = check_describe_credential(c);
        where = config_key_location(c, "agent", "node-name");
        /* The API server's words, for a terminal: escaped. */
        node = escape_untrusted(name);
        user = escape_untrusted(id->user);
        if (!credential || !where || !node || !user)
                return -ENOMEM;
        if (asprintf(ret_error,
                     "the credential of %s is node %s's (user %s), but node-name is %s (%s): the API server "
                     "would let kvolumed act only for node %s; use this node's own credential or fix node-name",
                     credential, node, user, c->node_name, where, node) < 0)
                return -ENOMEM;
        return -EPERM;
}

typedef struct OnlineCheck {
        const Config *config;
        FILE *out;
        const char *server;
        char *error;
        int result;
} OnlineCheck;

static void on_identity(K8sClient *client, const K8sIdentity *id, void *userdata) {
        OnlineCheck *o = userdata;
        _cleanup_free_ char *who = NULL, *message = NULL, *credential = check_describe_credential(o->config);

        o->result = 0;
        switch (id->result) {
        case K8S_IDENTITY_KNOWN:
                who = k8s_identity_to_string(id);
                fprintf(o->out, "online: API server %s: kvolumed is %s\n", o->server, strna(who));
                if (!k8s_identity_node_name(id))
                        fprintf(o->out, "online: not a node identity: the Node authorizer does not restrict "
                                "it; kvolumed needs no more than a node's rights (system:node:%s)\n",
                                o->config->node_name);
                o->result = check_identity(o->config, id, &o->error);
                break;
        case K8S_IDENTITY_UNSUPPORTED:
                fprintf(o->out, "online: API server %s: cannot tell who kvolumed is (no SelfSubjectReview: "
                        "Kubernetes before 1.27); the credential was accepted\n", o->server);
                break;
        case K8S_IDENTITY_FAILED:
                if (id->error == 0 && id->status == 403) {
                        /* Authenticated, but RBAC took system:basic-user away: not the credential's fault. */
                        fprintf(o->out, "online: API server %s: cannot tell who kvolumed is (SelfSubjectReview "
                                "forbidden); the credential was accepted\n", o->server);
                        break;
                }
                o->result = -EIO;
                /* It may quote the server's Status message: escaped for the terminal. */
                message = escape_untrusted(id->message ?: "the API server's answer could not be read");
                if (asprintf(&o->error, "%s: %s", strna(credential), strna(message)) < 0)
                        o->error = NULL;
                break;
        }
        (void) sd_event_exit(k8s_client_event(client), 0);
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        OnlineCheck *o = userdata;

        o->result = -ETIMEDOUT;
        if (asprintf(&o->error, "API server %s: no answer within %u s", o->server,
                     (unsigned) (ONLINE_TIMEOUT_USEC / USEC_PER_SEC)) < 0)
                o->error = NULL;
        return sd_event_exit(sd_event_source_get_event(s), 0);
}

int check_online(const Config *c, FILE *out, char **ret_error) {
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_(k8s_client_freep) K8sClient *client = NULL;
        _cleanup_(sd_event_source_unrefp) sd_event_source *timer = NULL;
        K8sAuth *auth = NULL;
        OnlineCheck o = { .config = c, .out = out, .result = -EINPROGRESS };
        int r;

        r = check_resolve_auth(c, &auth, ret_error);
        if (r < 0)
                return r;
        r = curl_loop_global_init();
        if (r < 0) {
                k8s_auth_free(auth);
                return r;
        }
        r = sd_event_new(&event);
        if (r < 0) {
                k8s_auth_free(auth);
                return r;
        }
        r = k8s_client_new(event, auth, &(K8sClientOptions){ .request_timeout_usec = ONLINE_TIMEOUT_USEC, .quiet_reachability = true },
                           &client);
        if (r < 0)
                return r;
        o.server = k8s_client_server(client);
        r = sd_event_add_time_relative(event, &timer, CLOCK_MONOTONIC, ONLINE_TIMEOUT_USEC + USEC_PER_SEC, 0,
                                       on_timeout, &o);
        if (r < 0)
                return r;
        r = k8s_identity_request(client, on_identity, &o, NULL);
        if (r < 0)
                return r;
        r = sd_event_loop(event);
        if (r < 0)
                return r;
        if (o.result < 0 && ret_error)
                *ret_error = TAKE_PTR(o.error);
        free(o.error);
        return o.result;
}
