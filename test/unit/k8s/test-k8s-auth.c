/* SPDX-License-Identifier: Apache-2.0 */
/* Kubeconfig variants, in-cluster and explicit settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
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

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_token_and_ca_file),
                cmocka_unit_test(test_data_forms),
                cmocka_unit_test(test_files_and_insecure),
                cmocka_unit_test(test_refused),
                cmocka_unit_test(test_in_cluster),
                cmocka_unit_test(test_explicit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
