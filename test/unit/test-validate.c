/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "systemd/macro.h"

#include "systemd/validate.h"

static void test_dns1123_subdomain(void **state) {
        assert_int_equal(validate_dns1123_subdomain("node-1"), 0);
        assert_int_equal(validate_dns1123_subdomain("a.b-c.d0"), 0);
        assert_int_equal(validate_dns1123_subdomain("0"), 0);
        assert_int_equal(validate_dns1123_subdomain(""), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("Node"), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("-node"), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("node-"), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("a..b"), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("a.b."), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("a/b"), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain("a_b"), -EINVAL);
        assert_int_equal(validate_dns1123_subdomain(NULL), -EINVAL);

        char label64[65];
        memset(label64, 'a', 64);
        label64[64] = '\0';
        /* Kubernetes does not limit the parts of a subdomain name to 63 characters. */
        assert_int_equal(validate_dns1123_subdomain(label64), 0);
        assert_int_equal(validate_dns1123_subdomain("csi-5a70c5de395ccad5e79daeb27c7c4f2634b675e6e1bb2a397999a016143bc9fb"),
                         0);
        assert_int_equal(validate_dns1123_label(label64), -EINVAL);
        label64[63] = '\0';
        assert_int_equal(validate_dns1123_subdomain(label64), 0);
        assert_int_equal(validate_dns1123_label(label64), 0);
        assert_int_equal(validate_dns1123_label("a.b"), -EINVAL);

        /* 254 characters in labels of 63: too long as a whole. */
        char longname[300] = "";
        for (int i = 0; i < 4; i++) {
                if (i)
                        strcat(longname, ".");
                memset(longname + strlen(longname), 'a', 62);
        }
        assert_int_equal(strlen(longname), 251);
        assert_int_equal(validate_dns1123_subdomain(longname), 0);
        strcat(longname, ".ab");
        assert_int_equal(validate_dns1123_subdomain(longname), -EINVAL);
}

static void test_csi_driver_name(void **state) {
        assert_int_equal(validate_csi_driver_name("hostpath.csi.k8s.io"), 0);
        assert_int_equal(validate_csi_driver_name("Example.CSI-driver"), 0);
        assert_int_equal(validate_csi_driver_name(".x"), -EINVAL);
        assert_int_equal(validate_csi_driver_name("x."), -EINVAL);
        assert_int_equal(validate_csi_driver_name("a/b"), -EINVAL);
        assert_int_equal(validate_csi_driver_name("a b"), -EINVAL);
        assert_int_equal(validate_csi_driver_name(""), -EINVAL);
        assert_int_equal(validate_csi_driver_name("a\xc3\xa9"), -EINVAL);
}

static void test_path_component(void **state) {
        assert_int_equal(validate_path_component("pvc-1234"), 0);
        assert_int_equal(validate_path_component("..."), 0);
        assert_int_equal(validate_path_component("."), -EINVAL);
        assert_int_equal(validate_path_component(".."), -EINVAL);
        assert_int_equal(validate_path_component("a/b"), -EINVAL);
        assert_int_equal(validate_path_component(""), -EINVAL);
        /* Control characters and what is not UTF-8 never become a path. */
        assert_int_equal(validate_path_component("a\nb"), -EINVAL);
        assert_int_equal(validate_path_component("a\x1b[2Jb"), -EINVAL);
        assert_int_equal(validate_path_component("a\x7f"), -EINVAL);
        assert_int_equal(validate_path_component("caf\xc3\xa9"), 0);
        assert_int_equal(validate_path_component("caf\xc3"), -EINVAL);
        assert_int_equal(validate_path_component("\xc0\xae\xc0\xae"), -EINVAL); /* overlong ".." */
        assert_int_equal(validate_path_component("\xed\xa0\x80"), -EINVAL);     /* a surrogate */
        assert_int_equal(validate_path_component("\xff"), -EINVAL);
        char big[300];
        memset(big, 'x', 256);
        big[256] = '\0';
        assert_int_equal(validate_path_component(big), -EINVAL);
        big[255] = '\0';
        assert_int_equal(validate_path_component(big), 0);
}

static void test_absolute_path(void **state) {
        assert_int_equal(validate_absolute_path("/"), 0);
        assert_int_equal(validate_absolute_path("/var/lib/kubelet"), 0);
        assert_int_equal(validate_absolute_path("var/lib"), -EINVAL);
        assert_int_equal(validate_absolute_path("/var/lib/"), -EINVAL);
        assert_int_equal(validate_absolute_path("/var//lib"), -EINVAL);
        assert_int_equal(validate_absolute_path("/var/../etc"), -EINVAL);
        assert_int_equal(validate_absolute_path("/var/./lib"), -EINVAL);
        assert_int_equal(validate_absolute_path("/var/..lib"), 0);
}

static void test_unix_endpoint(void **state) {
        const char *path = NULL;

        assert_int_equal(unix_endpoint_path("unix:///run/csi.sock", &path), 0);
        assert_string_equal(path, "/run/csi.sock");
        assert_int_equal(unix_endpoint_path("unix://run/csi.sock", NULL), -EINVAL);
        assert_int_equal(unix_endpoint_path("tcp://127.0.0.1:9000", NULL), -EINVAL);
        assert_int_equal(unix_endpoint_path("unix:///", NULL), -EINVAL);
        assert_int_equal(unix_endpoint_path("/run/csi.sock", NULL), -EINVAL);

        char longpath[200] = "unix:///";
        memset(longpath + 8, 'a', 120);
        longpath[128] = '\0';
        assert_int_equal(unix_endpoint_path(longpath, NULL), -ENAMETOOLONG);
}

static void check_escape(const char *in, const char *want) {
        char *got = escape_untrusted(in);
        assert_non_null(got);
        assert_string_equal(got, want);
        free(got);
}

/* What an API server answers is shown on a terminal: it may not fake a line
 * or send the terminal a sequence, and a name in another script stays legible. */
static void test_escape_untrusted(void **state) {
        check_escape("system:node:n1", "system:node:n1");
        check_escape("a\nonline: fake", "a\\nonline: fake");
        check_escape("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07");
        check_escape("tab\there\r\x7f", "tab\\there\\r\\x7f");
        check_escape("back\\slash", "back\\\\slash");
        check_escape("caf\xc3\xa9 \xe5\x90\x8d", "caf\xc3\xa9 \xe5\x90\x8d");
        check_escape("\xc2\x9b" "31m", "\\xc2\\x9b31m");           /* C1 CSI */
        check_escape("a\xe2\x80\xae" "b", "a\\xe2\\x80\\xaeb");     /* RIGHT-TO-LEFT OVERRIDE */
        check_escape("\xff\xc3", "\\xff\\xc3");                      /* not UTF-8 */
        assert_null(escape_untrusted(NULL));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_dns1123_subdomain), cmocka_unit_test(test_csi_driver_name),
                cmocka_unit_test(test_path_component),    cmocka_unit_test(test_absolute_path),
                cmocka_unit_test(test_unix_endpoint),     cmocka_unit_test(test_escape_untrusted),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
