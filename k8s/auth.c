/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml.h>

#include "k8s/auth.h"
#include "k8s/base64.h"
#include "systemd/errormsg.h"
#include "systemd/log.h"
#include "systemd/secure-file.h"

K8sAuth *k8s_auth_free(K8sAuth *a) {
        if (!a)
                return NULL;
        free(a->kubeconfig);
        free(a->server);
        free(a->ca_file);
        free(a->ca_data);
        if (a->token) {
                explicit_bzero(a->token, strlen(a->token));
                free(a->token);
        }
        free(a->token_file);
        free(a->client_cert_file);
        free(a->client_cert_data);
        free(a->client_key_file);
        if (a->client_key_data) {
                explicit_bzero(a->client_key_data, a->client_key_data_size);
                free(a->client_key_data);
        }
        free(a);
        return NULL;
}

/* --- a small view of a libyaml document ------------------------------------ */

static yaml_node_t *yaml_map_get(yaml_document_t *doc, yaml_node_t *map, const char *key) {
        if (!map || map->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(doc, p->key);
                if (k && k->type == YAML_SCALAR_NODE && streq((const char *) k->data.scalar.value, key))
                        return yaml_document_get_node(doc, p->value);
        }
        return NULL;
}

/* A scalar's text, NULL when absent or not a scalar; "" and "null" count as absent. */
static const char *yaml_map_scalar(yaml_document_t *doc, yaml_node_t *map, const char *key) {
        yaml_node_t *n = yaml_map_get(doc, map, key);
        const char *s;

        if (!n || n->type != YAML_SCALAR_NODE)
                return NULL;
        s = (const char *) n->data.scalar.value;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (streq(s, "null") || streq(s, "~")))
                return NULL;
        return *s ? s : NULL;
}

/* The "what" mapping of the entry of list "list" whose name is "name". */
static yaml_node_t *yaml_named_entry(yaml_document_t *doc, yaml_node_t *root, const char *list, const char *name,
                                     const char *what) {
        yaml_node_t *seq = yaml_map_get(doc, root, list);

        if (!seq || seq->type != YAML_SEQUENCE_NODE)
                return NULL;
        for (yaml_node_item_t *i = seq->data.sequence.items.start; i < seq->data.sequence.items.top; i++) {
                yaml_node_t *e = yaml_document_get_node(doc, *i);
                const char *n = yaml_map_scalar(doc, e, "name");
                if (n && streq(n, name)) {
                        yaml_node_t *inner = yaml_map_get(doc, e, what);
                        return inner && inner->type == YAML_MAPPING_NODE ? inner : NULL;
                }
        }
        return NULL;
}

static bool yaml_truthy(const char *s) {
        return s && (streq(s, "true") || streq(s, "True") || streq(s, "TRUE"));
}

static int path_resolve(const char *base_dir, const char *p, char **ret) {
        if (p[0] == '/' || !base_dir)
                *ret = strdup(p);
        else if (asprintf(ret, "%s/%s", base_dir, p) < 0)
                *ret = NULL;
        return *ret ? 0 : -ENOMEM;
}

static int data_decode(const char *text, const char *field, uint8_t **ret, size_t *ret_size, char **ret_error) {
        int r = k8s_base64_decode(text, ret, ret_size);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return error_message(ret_error, -EINVAL, "kubeconfig: %s is not valid base64", field);
        return 0;
}

static int kubeconfig_extract(yaml_document_t *doc, const char *base_dir, K8sAuth **ret, char **ret_error) {
        _cleanup_(k8s_auth_freep) K8sAuth *a = NULL;
        yaml_node_t *root = yaml_document_get_root_node(doc), *ctx, *cluster, *user;
        const char *current, *cluster_name, *user_name, *s;
        int r;

        if (!root || root->type != YAML_MAPPING_NODE)
                return error_message(ret_error, -EINVAL, "kubeconfig: not a YAML mapping");
        current = yaml_map_scalar(doc, root, "current-context");
        if (!current)
                return error_message(ret_error, -EINVAL, "kubeconfig: no current-context");
        ctx = yaml_named_entry(doc, root, "contexts", current, "context");
        if (!ctx)
                return error_message(ret_error, -EINVAL, "kubeconfig: context \"%s\" not found", current);
        cluster_name = yaml_map_scalar(doc, ctx, "cluster");
        user_name = yaml_map_scalar(doc, ctx, "user");
        if (!cluster_name)
                return error_message(ret_error, -EINVAL, "kubeconfig: context \"%s\" names no cluster",
                                     current);
        cluster = yaml_named_entry(doc, root, "clusters", cluster_name, "cluster");
        if (!cluster)
                return error_message(ret_error, -EINVAL, "kubeconfig: cluster \"%s\" not found",
                                     cluster_name);

        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        s = yaml_map_scalar(doc, cluster, "server");
        if (!s)
                return error_message(ret_error, -EINVAL, "kubeconfig: cluster \"%s\" has no server",
                                     cluster_name);
        if (strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)
                return error_message(ret_error, -EINVAL, "kubeconfig: server \"%s\" is not an http(s) URL",
                                     s);
        a->server = strdup(s);
        if (!a->server)
                return -ENOMEM;
        /* A path prefix is not supported: drop it.  The host starts after the
         * scheme's own length ("http://" alone is 7 bytes: +8 would read past it). */
        size_t scheme = strncmp(s, "https://", 8) == 0 ? 8 : 7;
        a->server[scheme + strcspn(a->server + scheme, "/")] = '\0';
        a->insecure_skip_tls_verify = yaml_truthy(yaml_map_scalar(doc, cluster, "insecure-skip-tls-verify"));
        if ((s = yaml_map_scalar(doc, cluster, "certificate-authority-data"))) {
                r = data_decode(s, "certificate-authority-data", &a->ca_data, &a->ca_data_size, ret_error);
                if (r < 0)
                        return r;
        } else if ((s = yaml_map_scalar(doc, cluster, "certificate-authority"))) {
                if (path_resolve(base_dir, s, &a->ca_file) < 0)
                        return -ENOMEM;
        }

        if (user_name) {
                user = yaml_named_entry(doc, root, "users", user_name, "user");
                if (!user)
                        return error_message(ret_error, -EINVAL, "kubeconfig: user \"%s\" not found",
                                             user_name);
                if (yaml_map_get(doc, user, "exec"))
                        return error_message(
                                ret_error, -EINVAL,
                                "kubeconfig: user \"%s\" uses an exec credential plugin, which is not "
                                "supported; use a token, tokenFile or client certificate",
                                user_name);
                if (yaml_map_get(doc, user, "auth-provider"))
                        return error_message(
                                ret_error, -EINVAL,
                                "kubeconfig: user \"%s\" uses an auth-provider, which is not supported; "
                                "use a token, tokenFile or client certificate",
                                user_name);
                if ((s = yaml_map_scalar(doc, user, "token")) && !(a->token = strdup(s)))
                        return -ENOMEM;
                if ((s = yaml_map_scalar(doc, user, "tokenFile")) && path_resolve(base_dir, s, &a->token_file) < 0)
                        return -ENOMEM;
                if ((s = yaml_map_scalar(doc, user, "client-certificate-data"))) {
                        r = data_decode(s, "client-certificate-data", &a->client_cert_data,
                                        &a->client_cert_data_size, ret_error);
                        if (r < 0)
                                return r;
                } else if ((s = yaml_map_scalar(doc, user, "client-certificate"))) {
                        if (path_resolve(base_dir, s, &a->client_cert_file) < 0)
                                return -ENOMEM;
                }
                if ((s = yaml_map_scalar(doc, user, "client-key-data"))) {
                        r = data_decode(s, "client-key-data", &a->client_key_data, &a->client_key_data_size,
                                        ret_error);
                        if (r < 0)
                                return r;
                } else if ((s = yaml_map_scalar(doc, user, "client-key"))) {
                        if (path_resolve(base_dir, s, &a->client_key_file) < 0)
                                return -ENOMEM;
                }
                bool has_cert = a->client_cert_file || a->client_cert_data;
                bool has_key = a->client_key_file || a->client_key_data;
                if (has_cert != has_key)
                        return error_message(ret_error, -EINVAL,
                                             "kubeconfig: user \"%s\" has a client %s but no client %s",
                                             user_name, has_cert ? "certificate" : "key",
                                             has_cert ? "key" : "certificate");
                if (yaml_map_get(doc, user, "username") || yaml_map_get(doc, user, "password"))
                        return error_message(
                                ret_error, -EINVAL,
                                "kubeconfig: user \"%s\" uses basic authentication, which is not supported",
                                user_name);
        }
        *ret = TAKE_PTR(a);
        return 0;
}

int k8s_auth_from_kubeconfig_string(const char *text, size_t size, const char *base_dir, K8sAuth **ret,
                                    char **ret_error) {
        yaml_parser_t parser;
        yaml_document_t doc;
        int r;

        if (ret_error)
                *ret_error = NULL;
        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *) text, size);
        if (!yaml_parser_load(&parser, &doc)) {
                r = error_message(ret_error, -EINVAL, "kubeconfig: YAML error at line %zu: %s",
                                  parser.problem_mark.line + 1, strempty(parser.problem));
                yaml_parser_delete(&parser);
                return r;
        }
        r = kubeconfig_extract(&doc, base_dir, ret, ret_error);
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        return r;
}

static int read_stream(FILE *f, char **ret, size_t *ret_size, size_t max) {
        _cleanup_free_ char *buf = NULL;
        size_t n;

        if (!f)
                return -errno;
        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        n = fread(buf, 1, max + 1, f);
        if (ferror(f))
                return -EIO;
        if (n > max)
                return -EFBIG;
        buf[n] = '\0';
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = n;
        return 0;
}

static int read_file(const char *path, char **ret, size_t *ret_size, size_t max) {
        _cleanup_(fclosep) FILE *f = fopen(path, "re");

        return read_stream(f, ret, ret_size, max);
}

/* The kubeconfig names the API server to believe and the credentials to
 * send it: configuration only root may write, as kvolumed.conf
 * (systemd/secure-file.h).  -EPERM with *ret_error saying why. */
static int read_kubeconfig(const char *path, char **ret, size_t *ret_size, char **ret_error) {
        _cleanup_(fclosep) FILE *f = NULL;
        int fd;

        fd = secure_open(path, false, ret_error);
        if (fd < 0)
                return fd;
        f = fdopen(fd, "r");
        if (!f) {
                (void) close(fd);
                return -errno;
        }
        return read_stream(f, ret, ret_size, 4 * 1024 * 1024);
}

int k8s_auth_from_kubeconfig(const char *path, K8sAuth **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL, *copy = NULL, *msg = NULL;
        size_t size = 0;
        int r;

        if (ret_error)
                *ret_error = NULL;
        r = read_kubeconfig(path, &text, &size, &msg);
        if (r == -EPERM && msg) {
                if (ret_error)
                        *ret_error = TAKE_PTR(msg);
                return r;
        }
        if (r < 0) {
                if (ret_error && asprintf(ret_error, "kubeconfig %s: %s", path, strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        r = k8s_auth_from_kubeconfig_string(text, size, dirname(copy), ret, &msg);
        explicit_bzero(text, size); /* it may hold a token or key */
        if (r < 0 && ret_error && msg && asprintf(ret_error, "%s: %s", path, msg) < 0)
                *ret_error = NULL;
        if (r >= 0 && !((*ret)->kubeconfig = strdup(path))) {
                *ret = k8s_auth_free(*ret);
                return -ENOMEM;
        }
        return r;
}

int k8s_auth_in_cluster(const char *dir, K8sAuth **ret, char **ret_error) {
        _cleanup_(k8s_auth_freep) K8sAuth *a = NULL;
        const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");

        if (ret_error)
                *ret_error = NULL;
        if (!dir)
                dir = K8S_SERVICE_ACCOUNT_DIR;
        if (isempty(host) || isempty(port))
                return error_message(ret_error, -EINVAL,
                                     "no kubeconfig or server configured, and not in a cluster "
                                     "(KUBERNETES_SERVICE_HOST/PORT unset)");
        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        /* An IPv6 service host needs brackets in the URL. */
        if (asprintf(&a->server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port) < 0)
                return -ENOMEM;
        if (asprintf(&a->token_file, "%s/token", dir) < 0 || asprintf(&a->ca_file, "%s/ca.crt", dir) < 0)
                return -ENOMEM;
        if (access(a->token_file, R_OK) < 0)
                return error_message(ret_error, -EINVAL, "in-cluster: cannot read %s: %m", a->token_file);
        *ret = TAKE_PTR(a);
        return 0;
}

int k8s_auth_resolve(const K8sAuthSettings *s, K8sAuth **ret, char **ret_error) {
        _cleanup_(k8s_auth_freep) K8sAuth *a = NULL;

        if (!isempty(s->kubeconfig))
                return k8s_auth_from_kubeconfig(s->kubeconfig, ret, ret_error);
        if (isempty(s->server))
                return k8s_auth_in_cluster(s->service_account_dir, ret, ret_error);

        if (ret_error)
                *ret_error = NULL;
        if (strncmp(s->server, "https://", 8) != 0 && strncmp(s->server, "http://", 7) != 0)
                return error_message(ret_error, -EINVAL, "server \"%s\" is not an http(s) URL", s->server);
        if (isempty(s->client_certificate) != isempty(s->client_key))
                return error_message(ret_error, -EINVAL, "client-certificate and client-key go together");
        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->server = strdup(s->server);
        if (!a->server)
                return -ENOMEM;
        size_t n = strlen(a->server);
        while (n > 8 && a->server[n - 1] == '/')
                a->server[--n] = '\0';
        if ((!isempty(s->token_file) && !(a->token_file = strdup(s->token_file))) ||
            (!isempty(s->certificate_authority) && !(a->ca_file = strdup(s->certificate_authority))) ||
            (!isempty(s->client_certificate) && !(a->client_cert_file = strdup(s->client_certificate))) ||
            (!isempty(s->client_key) && !(a->client_key_file = strdup(s->client_key))))
                return -ENOMEM;
        *ret = TAKE_PTR(a);
        return 0;
}

/* --- credentials in files that are replaced under us ------------------------ */

static void credential_wipe(char **data, size_t size) {
        if (*data) {
                explicit_bzero(*data, size);
                *data = mfree_str(*data);
        }
}

int k8s_credential_file_init(K8sCredentialFile *f, const char *path, const char *what, size_t max_size, bool trim) {
        *f = (K8sCredentialFile) { .what = what, .max_size = max_size, .trim = trim };
        f->path = strdup(path);
        return f->path ? 0 : -ENOMEM;
}

void k8s_credential_file_done(K8sCredentialFile *f) {
        credential_wipe(&f->data, f->size);
        f->path = mfree_str(f->path);
}

static bool credential_file_same(const K8sCredentialFile *f, const struct stat *st) {
        return st->st_dev == f->dev && st->st_ino == f->ino && st->st_size == f->file_size &&
               st->st_mtim.tv_sec == f->mtime.tv_sec && st->st_mtim.tv_nsec == f->mtime.tv_nsec;
}

int k8s_credential_file_refresh(K8sCredentialFile *f, bool force) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        char *buf;
        ssize_t k;
        size_t n = 0;

        if (!f->path)
                return 0;
        /* stat() follows the symlink: a switched symlink shows as another inode. */
        if (stat(f->path, &st) < 0)
                return log_warning_errno(errno, "Cannot stat %s file %s, keeping the previous one: %m", f->what,
                                         f->path);
        if (!force && f->data && credential_file_same(f, &st))
                return 0;
        fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_warning_errno(errno, "Cannot open %s file %s, keeping the previous one: %m", f->what,
                                         f->path);
        /* The identity recorded is that of what is read: the symlink may have
         * been switched again since the stat() above. */
        if (fstat(fd, &st) < 0)
                return log_warning_errno(errno, "Cannot stat %s file %s: %m", f->what, f->path);
        buf = calloc(1, f->max_size + 1);
        if (!buf)
                return -ENOMEM;
        while (n <= f->max_size) {
                k = read(fd, buf + n, f->max_size + 1 - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        int e = errno;
                        credential_wipe(&buf, f->max_size + 1);
                        return log_warning_errno(e, "Cannot read %s file %s, keeping the previous one: %m",
                                                 f->what, f->path);
                }
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        if (n > f->max_size) {
                credential_wipe(&buf, f->max_size + 1);
                return log_warning_errno(EFBIG, "The %s file %s is larger than %zu bytes, keeping the previous one",
                                         f->what, f->path, f->max_size);
        }
        if (f->trim)
                while (n > 0 && strchr(" \t\r\n", buf[n - 1]))
                        buf[--n] = '\0';
        f->dev = st.st_dev;
        f->ino = st.st_ino;
        f->file_size = st.st_size;
        f->mtime = st.st_mtim;
        if (f->data && f->size == n && memcmp(f->data, buf, n) == 0) {
                credential_wipe(&buf, n);
                return 0;
        }
        if (f->data)
                log_info("The %s in %s changed, using the new one", f->what, f->path);
        credential_wipe(&f->data, f->size);
        f->data = buf;
        f->size = n;
        return 1;
}

/* --- the credentials, opened and parsed as the client will use them -------- */

/* The name of a credential field where the operator wrote it: the kubeconfig's
 * field (certificate-authority, tokenFile, ...) or the [kubernetes] key. */
static const char *field_name(const K8sAuth *a, const char *kubeconfig_field, const char *setting_key) {
        return a->kubeconfig ? kubeconfig_field : setting_key;
}

/* PEM bytes of a file or of inline data, as one BIO. */
static int credential_bio(const char *file, const uint8_t *data, size_t size, BIO **ret, char **ret_reason) {
        _cleanup_free_ char *text = NULL;
        size_t n = 0;
        int r;

        if (data) {
                *ret = BIO_new_mem_buf(data, (int) size);
                return *ret ? 0 : -ENOMEM;
        }
        r = read_file(file, &text, &n, 4 * 1024 * 1024);
        if (r < 0) {
                *ret_reason = strdup(strerror(-r));
                return r;
        }
        *ret = BIO_new(BIO_s_mem());
        if (!*ret || BIO_write(*ret, text, (int) n) != (int) n) {
                explicit_bzero(text, n);
                return -ENOMEM;
        }
        explicit_bzero(text, n); /* it may hold the key */
        return 0;
}

static void bio_freep(BIO **b) {
        if (*b)
                BIO_free(*b);
}

static void x509_freep(X509 **x) {
        X509_free(*x);
}

static void pkey_freep(EVP_PKEY **k) {
        EVP_PKEY_free(*k);
}

/* "FIELD FILE" or "FIELD (inline data)", for messages. */
static const char *where(const char *file, char buf[static 512]) {
        snprintf(buf, 512, "%s", file ? file : "(inline data)");
        return buf;
}

static int check_ca(const K8sAuth *a, char **ret_error) {
        _cleanup_(bio_freep) BIO *bio = NULL;
        _cleanup_free_ char *reason = NULL;
        const char *field = field_name(a, a->ca_data ? "certificate-authority-data" : "certificate-authority",
                                       "certificate-authority");
        char buf[512];
        unsigned n = 0;
        int r;

        if (!a->ca_file && !a->ca_data)
                return 0; /* the system's CA store, as curl uses it */
        r = credential_bio(a->ca_file, a->ca_data, a->ca_data_size, &bio, &reason);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return error_message(ret_error, -EINVAL, "%s %s: cannot read: %s", field,
                                     where(a->ca_file, buf), strempty(reason));
        for (;;) {
                X509 *x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
                if (!x)
                        break;
                X509_free(x);
                n++;
        }
        ERR_clear_error();
        if (n == 0)
                return error_message(ret_error, -EINVAL,
                                     "%s %s: no PEM certificate in it (expected \"-----BEGIN "
                                     "CERTIFICATE-----\")",
                                     field, where(a->ca_file, buf));
        return 0;
}

static int check_client_certificate(const K8sAuth *a, const char **ret_key, char **ret_error) {
        _cleanup_(bio_freep) BIO *cert_bio = NULL, *key_bio = NULL;
        _cleanup_(x509_freep) X509 *cert = NULL;
        _cleanup_(pkey_freep) EVP_PKEY *key = NULL;
        _cleanup_free_ char *reason = NULL;
        const char *cert_field = field_name(a, a->client_cert_data ? "client-certificate-data" : "client-certificate",
                                            "client-certificate");
        const char *key_field = field_name(a, a->client_key_data ? "client-key-data" : "client-key", "client-key");
        /* The key may sit in the certificate's file (kubelet-client-current.pem). */
        const char *key_file = a->client_key_file ?: (a->client_key_data ? NULL : a->client_cert_file);
        char buf[512];
        int r;

        if (!a->client_cert_file && !a->client_cert_data)
                return 0;
        r = credential_bio(a->client_cert_file, a->client_cert_data, a->client_cert_data_size, &cert_bio, &reason);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return error_message(ret_error, -EINVAL, "%s %s: cannot read: %s", cert_field,
                                     where(a->client_cert_file, buf), strempty(reason));
        cert = PEM_read_bio_X509(cert_bio, NULL, NULL, NULL);
        if (!cert) {
                ERR_clear_error();
                return error_message(ret_error, -EINVAL, "%s %s: no PEM certificate in it", cert_field,
                                     where(a->client_cert_file, buf));
        }
        *ret_key = "client-key";
        r = credential_bio(key_file, a->client_key_data, a->client_key_data_size, &key_bio, &reason);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return error_message(ret_error, -EINVAL, "%s %s: cannot read: %s", key_field,
                                     where(key_file, buf), strempty(reason));
        key = PEM_read_bio_PrivateKey(key_bio, NULL, NULL, NULL);
        if (!key) {
                ERR_clear_error();
                return error_message(ret_error, -EINVAL,
                                     "%s %s: no PEM private key in it (or one with a passphrase)", key_field,
                                     where(key_file, buf));
        }
        if (X509_check_private_key(cert, key) != 1) {
                ERR_clear_error();
                return error_message(ret_error, -EINVAL, "%s %s is not the key of the certificate in %s %s",
                                     key_field, where(key_file, buf), cert_field,
                                     a->client_cert_file ? a->client_cert_file : "(inline data)");
        }
        return 0;
}

static int check_token_file(const K8sAuth *a, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        const char *field = field_name(a, "tokenFile", "token-file");
        size_t n = 0;
        int r;

        if (!a->token_file)
                return 0;
        r = read_file(a->token_file, &text, &n, 64 * 1024);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return error_message(ret_error, -EINVAL, "%s %s: cannot read: %s", field, a->token_file,
                                     strerror(-r));
        while (n > 0 && strchr(" \t\r\n", text[n - 1]))
                n--;
        explicit_bzero(text, n);
        if (n == 0)
                return error_message(ret_error, -EINVAL, "%s %s: the file is empty", field, a->token_file);
        return 0;
}

int k8s_auth_check_credentials(const K8sAuth *a, const char **ret_key, char **ret_error) {
        int r;

        if (ret_error)
                *ret_error = NULL;
        *ret_key = "certificate-authority";
        r = check_ca(a, ret_error);
        if (r < 0)
                return r;
        *ret_key = "client-certificate";
        r = check_client_certificate(a, ret_key, ret_error);
        if (r < 0)
                return r;
        *ret_key = "token-file";
        r = check_token_file(a, ret_error);
        if (r >= 0)
                *ret_key = NULL;
        return r;
}
