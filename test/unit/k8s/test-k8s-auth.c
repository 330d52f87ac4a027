/* SPDX-License-Identifier: Apache-2.0 */
/* Kubeconfig variants, in-cluster and explicit settings, credential files
 * that are rotated under the client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "k8s/auth.h"

#define CLUSTER(extra)                                                                                     \
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n"                                             \
        "contexts:\n- name: other\n  context: {cluster: nope, user: nope}\n"                               \
        "- name: ctx\n  context:\n    cluster: c1\n    user: u1\n    namespace: default\n"                 \
        "clusters:\n- name: c1\n  cluster:\n    server: https://10.0.0.1:6443/\n" extra

static K8sAuth *parse_ok(const char *text) {
        K8sAuth *a = NULL;
        char *err = NULL;
        int r = k8s_auth_from_kubeconfig_string(text, strlen(text), "/etc/kube", &a, &err);
        if (r < 0)
                fail_msg("unexpected error %d: %s", r, strempty(err));
        assert_null(err);
        return a;
}

static char *parse_fail(const char *text) {
        K8sAuth *a = NULL;
        char *err = NULL;
        assert_int_equal(k8s_auth_from_kubeconfig_string(text, strlen(text), "/etc/kube", &a, &err), -EINVAL);
        assert_null(a);
        assert_non_null(err);
        return err;
}

static void test_token_and_ca_file(void **state) {
        K8sAuth *a = parse_ok(CLUSTER("    certificate-authority: pki/ca.crt\n"
                                      "users:\n- name: u1\n  user:\n    token: abc.def\n"));
        assert_string_equal(a->server, "https://10.0.0.1:6443");
        assert_string_equal(a->ca_file, "/etc/kube/pki/ca.crt");
        assert_string_equal(a->token, "abc.def");
        assert_null(a->token_file);
        assert_false(a->insecure_skip_tls_verify);
        k8s_auth_free(a);
}

static void test_data_forms(void **state) {
        /* "LS0tCg==" = "---\n", "a2V5" = "key" */
        K8sAuth *a = parse_ok(CLUSTER("    certificate-authority-data: LS0tCg==\n"
                                      "    certificate-authority: /ignored\n"
                                      "users:\n- name: u1\n  user:\n"
                                      "    client-certificate-data: LS0tCg==\n    client-key-data: a2V5\n"));
        assert_int_equal(a->ca_data_size, 4);
        assert_memory_equal(a->ca_data, "---\n", 4);
        assert_null(a->ca_file);
        assert_int_equal(a->client_cert_data_size, 4);
        assert_int_equal(a->client_key_data_size, 3);
        assert_memory_equal(a->client_key_data, "key", 3);
        k8s_auth_free(a);
}

static void test_files_and_insecure(void **state) {
        K8sAuth *a = parse_ok(CLUSTER("    insecure-skip-tls-verify: true\n"
                                      "users:\n- name: u1\n  user:\n    tokenFile: /var/run/token\n"
                                      "    client-certificate: c.crt\n    client-key: /abs/c.key\n"));
        assert_true(a->insecure_skip_tls_verify);
        assert_string_equal(a->token_file, "/var/run/token");
        assert_string_equal(a->client_cert_file, "/etc/kube/c.crt");
        assert_string_equal(a->client_key_file, "/abs/c.key");
        k8s_auth_free(a);
}

static void test_refused(void **state) {
        char *e;

        e = parse_fail(CLUSTER("users:\n- name: u1\n  user:\n    exec:\n      command: aws\n"));
        assert_non_null(strstr(e, "exec"));
        assert_non_null(strstr(e, "not supported"));
        free(e);
        e = parse_fail(CLUSTER("users:\n- name: u1\n  user:\n    auth-provider:\n      name: gcp\n"));
        assert_non_null(strstr(e, "auth-provider"));
        free(e);
        e = parse_fail(CLUSTER("users:\n- name: u1\n  user:\n    client-certificate: c.crt\n"));
        assert_non_null(strstr(e, "no client key"));
        free(e);
        e = parse_fail(CLUSTER("users:\n- name: u1\n  user:\n    client-key-data: '***'\n"));
        assert_non_null(strstr(e, "base64"));
        free(e);
        e = parse_fail(CLUSTER("users:\n- name: someone-else\n  user: {token: x}\n"));
        assert_non_null(strstr(e, "user \"u1\" not found"));
        free(e);
        e = parse_fail("apiVersion: v1\nclusters: []\n");
        assert_non_null(strstr(e, "current-context"));
        free(e);
        e = parse_fail("current-context: x\ncontexts: []\n");
        assert_non_null(strstr(e, "context \"x\" not found"));
        free(e);
        e = parse_fail("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n"
                       "clusters:\n- name: c\n  cluster: {server: ftp://x}\n");
        assert_non_null(strstr(e, "not an http(s) URL"));
        free(e);
        e = parse_fail("current-context: [unclosed\n");
        assert_non_null(strstr(e, "YAML error"));
        free(e);
        e = parse_fail("- just\n- a list\n");
        free(e);
}

static void test_in_cluster(void **state) {
        char dir[] = "/tmp/test-k8s-auth-XXXXXX", path[256];
        K8sAuth *a = NULL;
        char *err = NULL;
        FILE *f;

        assert_non_null(mkdtemp(dir));
        unsetenv("KUBERNETES_SERVICE_HOST");
        assert_int_equal(k8s_auth_in_cluster(dir, &a, &err), -EINVAL);
        assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
        free(err);

        setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        assert_int_equal(k8s_auth_in_cluster(dir, &a, &err), -EINVAL); /* no token file */
        assert_non_null(strstr(err, "token"));
        free(err);
        snprintf(path, sizeof path, "%s/token", dir);
        f = fopen(path, "we");
        fputs("tok\n", f);
        fclose(f);
        K8sAuthSettings s = { .service_account_dir = dir };
        assert_int_equal(k8s_auth_resolve(&s, &a, &err), 0);
        assert_string_equal(a->server, "https://[fd00::1]:443");
        assert_string_equal(a->token_file, path);
        snprintf(path, sizeof path, "%s/ca.crt", dir);
        assert_string_equal(a->ca_file, path);
        k8s_auth_free(a);
        unlink(a ? path : path);
        snprintf(path, sizeof path, "%s/token", dir);
        unlink(path);
        rmdir(dir);
}

static void test_explicit(void **state) {
        K8sAuthSettings s = { .server = "https://api.example:6443/", .token_file = "/t",
                              .certificate_authority = "/ca" };
        K8sAuth *a = NULL;
        char *err = NULL;

        assert_int_equal(k8s_auth_resolve(&s, &a, &err), 0);
        assert_string_equal(a->server, "https://api.example:6443");
        assert_string_equal(a->token_file, "/t");
        assert_string_equal(a->ca_file, "/ca");
        k8s_auth_free(a);

        s.client_certificate = "/c";
        assert_int_equal(k8s_auth_resolve(&s, &a, &err), -EINVAL);
        assert_non_null(strstr(err, "client-key"));
        free(err);

        s = (K8sAuthSettings) { .kubeconfig = "/nonexistent/kubeconfig" };
        assert_true(k8s_auth_resolve(&s, &a, &err) < 0);
        assert_non_null(strstr(err, "/nonexistent/kubeconfig"));
        free(err);
}

static void write_text(const char *dir, const char *name, const char *text) {
        char path[256];
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", dir, name);
        f = fopen(path, "we");
        assert_non_null(f);
        assert_int_equal(fputs(text, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
}

/* kubelet's rotation: a new file, then the symlink switched to it. */
static void switch_symlink(const char *dir, const char *link, const char *target) {
        char tmp[256], path[256];

        snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, link);
        snprintf(path, sizeof path, "%s/%s", dir, link);
        assert_int_equal(symlink(target, tmp), 0);
        assert_int_equal(rename(tmp, path), 0);
}

static void assert_credential(const K8sCredentialFile *f, const char *text) {
        assert_non_null(f->data);
        assert_int_equal(f->size, strlen(text));
        assert_string_equal(f->data, text);
}

static void test_credential_file_rotation(void **state) {
        char dir[] = "/tmp/test-k8s-auth-XXXXXX", path[256];
        K8sCredentialFile f;
        struct stat st;
        struct timespec times[2];
        FILE *w;

        assert_non_null(mkdtemp(dir));
        write_text(dir, "client-1.pem", "CERT-1 KEY-1\n");
        switch_symlink(dir, "current.pem", "client-1.pem");
        snprintf(path, sizeof path, "%s/current.pem", dir);

        assert_int_equal(k8s_credential_file_init(&f, path, "client certificate", 64, false), 0);
        assert_null(f.data);
        assert_int_equal(k8s_credential_file_refresh(&f, false), 1);
        assert_credential(&f, "CERT-1 KEY-1\n"); /* certificates keep their bytes */
        assert_int_equal(k8s_credential_file_refresh(&f, false), 0);

        /* Another file (inode) behind the symlink. */
        write_text(dir, "client-2.pem", "CERT-2 KEY-2\n");
        switch_symlink(dir, "current.pem", "client-2.pem");
        assert_int_equal(k8s_credential_file_refresh(&f, false), 1);
        assert_credential(&f, "CERT-2 KEY-2\n");
        assert_int_equal(k8s_credential_file_refresh(&f, false), 0);

        /* A new file with the same content is no change. */
        write_text(dir, "client-3.pem", "CERT-2 KEY-2\n");
        switch_symlink(dir, "current.pem", "client-3.pem");
        assert_int_equal(k8s_credential_file_refresh(&f, false), 0);
        assert_credential(&f, "CERT-2 KEY-2\n");

        /* Rewritten in place with the old metadata: only a forced read sees it. */
        snprintf(path, sizeof path, "%s/client-3.pem", dir);
        assert_int_equal(stat(path, &st), 0);
        w = fopen(path, "r+e");
        assert_non_null(w);
        fputs("CERT-3 KEY-3\n", w);
        assert_int_equal(fclose(w), 0);
        times[0] = st.st_atim;
        times[1] = st.st_mtim;
        assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
        assert_int_equal(k8s_credential_file_refresh(&f, false), 0);
        assert_credential(&f, "CERT-2 KEY-2\n");
        assert_int_equal(k8s_credential_file_refresh(&f, true), 1);
        assert_credential(&f, "CERT-3 KEY-3\n");
        assert_int_equal(k8s_credential_file_refresh(&f, true), 0);

        /* A dangling symlink or a file too large keeps the last good content. */
        switch_symlink(dir, "current.pem", "missing.pem");
        assert_int_equal(k8s_credential_file_refresh(&f, false), -ENOENT);
        assert_credential(&f, "CERT-3 KEY-3\n");
        write_text(dir, "huge.pem", "0123456789012345678901234567890123456789012345678901234567890123456789\n");
        switch_symlink(dir, "current.pem", "huge.pem");
        assert_int_equal(k8s_credential_file_refresh(&f, false), -EFBIG);
        assert_credential(&f, "CERT-3 KEY-3\n");
        k8s_credential_file_done(&f);
        assert_null(f.data);
        assert_null(f.path);

        /* Tokens: trailing whitespace is not part of them. */
        write_text(dir, "token", "abc.def \r\n");
        snprintf(path, sizeof path, "%s/token", dir);
        assert_int_equal(k8s_credential_file_init(&f, path, "token", 64, true), 0);
        assert_int_equal(k8s_credential_file_refresh(&f, false), 1);
        assert_credential(&f, "abc.def");
        k8s_credential_file_done(&f);

        /* A path that was never there fails the first read. */
        snprintf(path, sizeof path, "%s/none", dir);
        assert_int_equal(k8s_credential_file_init(&f, path, "token", 64, true), 0);
        assert_int_equal(k8s_credential_file_refresh(&f, false), -ENOENT);
        assert_null(f.data);
        k8s_credential_file_done(&f);

        static const char *const names[] = { "client-1.pem", "client-2.pem", "client-3.pem", "huge.pem",
                                             "current.pem", "token" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                snprintf(path, sizeof path, "%s/%s", dir, names[i]);
                assert_int_equal(unlink(path), 0);
        }
        assert_int_equal(rmdir(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_credential_file_rotation),
                cmocka_unit_test(test_token_and_ca_file),
                cmocka_unit_test(test_data_forms),
                cmocka_unit_test(test_files_and_insecure),
                cmocka_unit_test(test_refused),
                cmocka_unit_test(test_in_cluster),
                cmocka_unit_test(test_explicit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
