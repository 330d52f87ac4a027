/* SPDX-License-Identifier: Apache-2.0 */
/* The pure parts of volume/host: subPathExpr, subPath validation, the
 * emptyDir tmpfs size, the hostPath type table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "volume/host/hostpathtype.h"
#include "volume/host/subpath.h"
#include "volume/host/tmpfs.h"

static void expands(const char *expr, const char *const *env, size_t n, const char *want) {
        char *out = NULL, *err = NULL;
        assert_int_equal(subpath_expand(expr, env, n, &out, &err), 0);
        assert_string_equal(out, want);
        assert_null(err);
        free(out);
}

static void misses(const char *expr, const char *const *env, size_t n, const char *want_error) {
        char *out = NULL, *err = NULL;
        assert_int_equal(subpath_expand(expr, env, n, &out, &err), -EINVAL);
        assert_null(out);
        assert_string_equal(err, want_error);
        free(err);
}

/* kubelet's third_party/forked/golang/expansion rules. */
static void test_expand_like_kubelet(void **state) {
        const char *env[] = { "POD_NAME=web-0", "NS=default", "EMPTY=", "NS=prod", "A_B=x" };
        size_t n = sizeof env / sizeof env[0];

        expands("", env, n, "");
        expands("logs", env, n, "logs");
        expands("$(POD_NAME)", env, n, "web-0");
        expands("$(NS)/$(POD_NAME)/log", env, n, "prod/web-0/log"); /* the later NS wins */
        expands("$(A_B)$(A_B)", env, n, "xx");
        expands("$$(POD_NAME)", env, n, "$(POD_NAME)"); /* "$$" escapes */
        expands("a$$b", env, n, "a$b");
        expands("$POD_NAME", env, n, "$POD_NAME");   /* not a reference: kept */
        expands("$(POD_NAME", env, n, "$(POD_NAME"); /* unclosed: kept */
        expands("dir$", env, n, "dir$");             /* a final "$": kept */
        expands("$$$(POD_NAME)", env, n, "$web-0");
}

static void test_expand_missing_and_empty(void **state) {
        const char *env[] = { "POD_NAME=web-0", "EMPTY=" };
        size_t n = sizeof env / sizeof env[0];

        misses("$(NOPE)", env, n, "missing value for NOPE");
        misses("$(EMPTY)/x", env, n, "missing value for EMPTY");                /* empty counts as missing */
        misses("$(Z)/$(B)/$(Z)/$(POD_NAME)", env, n, "missing value for B, Z"); /* sorted, once */
        misses("$(POD)", NULL, 0, "missing value for POD");
        /* "$($(X))": the name runs to the first ')' */
        misses("$($(X))", env, n, "missing value for $(X");
}

static void refused(const char *subpath, const char *want) {
        char *err = NULL;
        assert_int_equal(subpath_validate(subpath, &err), -EINVAL);
        assert_string_equal(err, want);
        free(err);
}

static void test_validate_like_kubelet(void **state) {
        char long_path[5000];

        assert_int_equal(subpath_validate("a", NULL), 0);
        assert_int_equal(subpath_validate("a/b/c", NULL), 0);
        assert_int_equal(subpath_validate("..a/b..", NULL), 0); /* only a whole ".." element */
        assert_int_equal(subpath_validate("a/./b", NULL), 0);
        assert_int_equal(subpath_validate("a/", NULL), 0);
        refused("/etc", "error SubPath `/etc` must not be an absolute path");
        refused("..", "unable to provision SubPath `..`: must not contain '..'");
        refused("a/../b", "unable to provision SubPath `a/../b`: must not contain '..'");
        refused("a/..", "unable to provision SubPath `a/..`: must not contain '..'");
        refused("../a", "unable to provision SubPath `../a`: must not contain '..'");
        refused("a\nb", "SubPath contains a control character");
        memset(long_path, 'a', sizeof long_path - 1);
        long_path[sizeof long_path - 1] = '\0';
        assert_int_equal(subpath_validate(long_path, NULL), -EINVAL);
        assert_int_equal(subpath_validate("", NULL), -EINVAL);
        assert_int_equal(subpath_validate(NULL, NULL), -EINVAL);
}

#define GiB (UINT64_C(1) << 30)
#define MiB (UINT64_C(1) << 20)

/* calculateEmptyDirMemorySize and ResourceConfigForPod. */
static void test_emptydir_memory_size(void **state) {
        uint64_t two[] = { 1 * GiB, 512 * MiB }, unlimited[] = { 1 * GiB, 0 }, init[] = { 2 * GiB },
                 small_init[] = { 64 * MiB };

        /* The pod's limit: a sum, raised to the largest init container, plus overhead. */
        assert_int_equal(emptydir_pod_memory_limit(two, 2, NULL, 0, 0), 1536 * MiB);
        assert_int_equal(emptydir_pod_memory_limit(two, 2, small_init, 1, 0), 1536 * MiB);
        assert_int_equal(emptydir_pod_memory_limit(two, 2, init, 1, 0), 2 * GiB);
        assert_int_equal(emptydir_pod_memory_limit(two, 2, NULL, 0, 100 * MiB), 1636 * MiB);
        /* One container without a limit: the pod has none. */
        assert_int_equal(emptydir_pod_memory_limit(unlimited, 2, NULL, 0, 100 * MiB), 0);
        assert_int_equal(emptydir_pod_memory_limit(two, 2, unlimited + 1, 1, 0), 0);
        assert_int_equal(emptydir_pod_memory_limit(NULL, 0, NULL, 0, 100 * MiB), 0);

        /* The size: allocatable, lowered to the pod's limit, lowered to sizeLimit. */
        assert_int_equal(emptydir_memory_size(8 * GiB, 0, 0), 8 * GiB);
        assert_int_equal(emptydir_memory_size(8 * GiB, 1 * GiB, 0), 1 * GiB);
        assert_int_equal(emptydir_memory_size(8 * GiB, 1 * GiB, 64 * MiB), 64 * MiB);
        assert_int_equal(emptydir_memory_size(8 * GiB, 0, 64 * MiB), 64 * MiB);
        /* sizeLimit above what the pod may use does not raise it. */
        assert_int_equal(emptydir_memory_size(8 * GiB, 1 * GiB, 2 * GiB), 1 * GiB);
        assert_int_equal(emptydir_memory_size(8 * GiB, 0, 16 * GiB), 8 * GiB);
        /* A pod limit above allocatable is ignored (0 < limit <= size only). */
        assert_int_equal(emptydir_memory_size(8 * GiB, 16 * GiB, 0), 8 * GiB);
        /* Equal values are taken. */
        assert_int_equal(emptydir_memory_size(8 * GiB, 8 * GiB, 8 * GiB), 8 * GiB);
        /* Nothing known: 0, no size= (the kernel's default). */
        assert_int_equal(emptydir_memory_size(0, 1 * GiB, 64 * MiB), 0);
}

static void test_host_path_type_table(void **state) {
        static const struct {
                const char *s;
                HostPathType t;
        } table[] = {
                { "", HOST_PATH_UNSET },
                { "DirectoryOrCreate", HOST_PATH_DIRECTORY_OR_CREATE },
                { "Directory", HOST_PATH_DIRECTORY },
                { "FileOrCreate", HOST_PATH_FILE_OR_CREATE },
                { "File", HOST_PATH_FILE },
                { "Socket", HOST_PATH_SOCKET },
                { "CharDevice", HOST_PATH_CHAR_DEVICE },
                { "BlockDevice", HOST_PATH_BLOCK_DEVICE },
        };
        char *err = NULL;

        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
                assert_int_equal(host_path_type_from_string(table[i].s), table[i].t);
                assert_string_equal(host_path_type_to_string(table[i].t), table[i].s);
        }
        assert_int_equal(host_path_type_from_string(NULL), HOST_PATH_UNSET);
        assert_int_equal(host_path_type_from_string("directory"), _HOST_PATH_TYPE_INVALID);
        assert_int_equal(host_path_type_from_string("Pipe"), _HOST_PATH_TYPE_INVALID);
        assert_null(host_path_type_to_string(_HOST_PATH_TYPE_INVALID));
        assert_null(host_path_type_to_string(_HOST_PATH_TYPE_MAX));
        /* No check for "", but the path must still be absolute. */
        assert_int_equal(host_path_check("/nonexistent/kv-host-pure", HOST_PATH_UNSET, NULL), 0);
        assert_int_equal(host_path_check("relative", HOST_PATH_DIRECTORY, &err), -EINVAL);
        free(err);
        err = NULL;
        assert_int_equal(host_path_check_spec("/x", "Pipe", &err), -EINVAL);
        assert_string_equal(err, "Pipe is an invalid volume type");
        free(err);
        err = NULL;
        assert_int_equal(host_path_check_spec("/nonexistent/kv-host-pure", "", NULL), 0);
        /* A missing path fails with kubelet's message, nothing created. */
        assert_int_equal(host_path_check("/nonexistent/kv-host-pure", HOST_PATH_DIRECTORY, &err), -ENOENT);
        assert_string_equal(err, "hostPath type check failed: /nonexistent/kv-host-pure is not a directory");
        free(err);
        err = NULL;
        assert_int_equal(host_path_check("/nonexistent/kv-host-pure", HOST_PATH_SOCKET, &err), -ENOENT);
        assert_string_equal(err,
                            "hostPath type check failed: /nonexistent/kv-host-pure is not a socket file");
        free(err);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_expand_like_kubelet),
                cmocka_unit_test(test_expand_missing_and_empty),
                cmocka_unit_test(test_validate_like_kubelet),
                cmocka_unit_test(test_emptydir_memory_size),
                cmocka_unit_test(test_host_path_type_table),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
