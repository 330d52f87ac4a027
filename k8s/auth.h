/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Where the API server is and how to authenticate to it: from a kubeconfig
 * file, from explicit settings, or in-cluster from the service account
 * directory.  Only the forms kvolumed supports are accepted; an "exec" or
 * "auth-provider" user is refused with a message saying so. */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "systemd/macro.h"

#define K8S_SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct K8sAuth {
        char *kubeconfig; /* the file it came from, for messages; NULL for explicit settings */
        char *server; /* "https://host:port", no trailing '/' */
        bool insecure_skip_tls_verify;
        char *ca_file;          /* either a file ... */
        uint8_t *ca_data;       /* ... or PEM bytes (certificate-authority-data) */
        size_t ca_data_size;
        char *token;            /* a fixed bearer token ... */
        char *token_file;       /* ... or a file re-read when it changes */
        char *client_cert_file; /* both files re-read when they change; may be one file */
        uint8_t *client_cert_data;
        size_t client_cert_data_size;
        char *client_key_file;
        uint8_t *client_key_data; /* wiped when freed */
        size_t client_key_data_size;
} K8sAuth;

/* The [kubernetes] settings, passed in by whoever reads the configuration. */
typedef struct K8sAuthSettings {
        const char *kubeconfig;
        const char *server;
        const char *token_file;
        const char *certificate_authority;
        const char *client_certificate;
        const char *client_key;
        const char *service_account_dir; /* NULL: K8S_SERVICE_ACCOUNT_DIR */
} K8sAuthSettings;

K8sAuth *k8s_auth_free(K8sAuth *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(K8sAuth *, k8s_auth_free);

/* Kubeconfig text; relative file paths are resolved against base_dir (the
 * kubeconfig's directory, as client-go does).  On failure returns -EINVAL (or
 * -ENOMEM) and an explanation in *ret_error. */
int k8s_auth_from_kubeconfig_string(const char *text, size_t size, const char *base_dir, K8sAuth **ret,
                                    char **ret_error);
int k8s_auth_from_kubeconfig(const char *path, K8sAuth **ret, char **ret_error);

/* In-cluster: KUBERNETES_SERVICE_HOST/PORT and <dir>/{token,ca.crt}. */
int k8s_auth_in_cluster(const char *service_account_dir, K8sAuth **ret, char **ret_error);

/* Picks kubeconfig, explicit server, or in-cluster (both empty), per DESIGN §2. */
int k8s_auth_resolve(const K8sAuthSettings *s, K8sAuth **ret, char **ret_error);

/* Opens and parses what the client will use, as it will use it: the CA bundle
 * (at least one PEM certificate), the client certificate and its key (PEM,
 * and the key must be the certificate's), the token file (readable, not
 * empty).  Whether the CA is the API server's can only be seen online.  On
 * failure -EINVAL (or -ENOMEM), *ret_key the [kubernetes] setting at fault
 * ("certificate-authority", "client-certificate", "client-key",
 * "token-file"), and *ret_error names the field as the operator wrote it (in
 * the kubeconfig: certificate-authority-data, tokenFile, ...) and the file. */
int k8s_auth_check_credentials(const K8sAuth *a, const char **ret_key, char **ret_error);

/* A credential kept in a file that is replaced while kvolumed runs: a
 * projected service account token (renamed over), kubelet's rotated client
 * certificate (kubelet-client-current.pem, a symlink switched to a new file).
 * A stat() before each use notices a change cheaply: the identity of the file
 * behind the path (device, inode, size, mtime) is compared with the one last
 * read.  After the server refused the credential, a forced re-read also
 * catches a file rewritten in place with its old metadata. */
typedef struct K8sCredentialFile {
        char *path;
        const char *what; /* "token", "client certificate", ... for log lines */
        size_t max_size;
        bool trim;        /* trailing whitespace is not part of it (tokens, as client-go) */
        char *data;       /* NUL-terminated; NULL until read; wiped when replaced */
        size_t size;
        dev_t dev;
        ino_t ino;
        off_t file_size;
        struct timespec mtime;
} K8sCredentialFile;

int k8s_credential_file_init(K8sCredentialFile *f, const char *path, const char *what, size_t max_size, bool trim);
/* 1 when the content is new (the first read included), 0 when unchanged; on
 * failure a warning is logged, the previous content kept, and -errno returned. */
int k8s_credential_file_refresh(K8sCredentialFile *f, bool force);
void k8s_credential_file_done(K8sCredentialFile *f);
