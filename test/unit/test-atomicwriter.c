/* SPDX-License-Identifier: Apache-2.0 */
/* The atomic writer against kubelet's rules (atomic_writer_test.go's cases,
 * as a table where they are one), plus what kvolumed adds: nothing followed
 * out of the volume directory, nothing of the user's clobbered, fsGroup on
 * the new version before the swap, and a crash at any step leaving one
 * version visible, cleaned up by the next write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/tmptree.h"
#include "volume/host/atomicwriter.h"

/* The tables give a mode only where it is not 0644. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define GID 4242
#define UID 4343

static char base[] = "/tmp/kv-atomicwriter-XXXXXX";
static char dir[300], outside[300];
static int dir_fd = -1;

typedef struct KV {
        const char *path, *data;
        mode_t mode;
} KV;

static void reset_dir(void) {
        if (dir_fd >= 0)
                close(dir_fd);
        assert_int_equal(tmptree_remove(dir), 0);
        assert_int_equal(tmptree_remove(outside), 0);
        assert_int_equal(mkdir(dir, 0750), 0);
        assert_int_equal(mkdir(outside, 0700), 0);
        dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        assert_true(dir_fd >= 0);
}

static int setup(void **state) {
        if (!mkdtemp(base))
                return -1;
        snprintf(dir, sizeof dir, "%s/volume", base);
        snprintf(outside, sizeof outside, "%s/outside", base);
        reset_dir();
        return 0;
}

static int teardown(void **state) {
        close(dir_fd);
        dir_fd = -1;
        return tmptree_remove(base) == 0 ? 0 : -1;
}

static int each_setup(void **state) {
        reset_dir();
        return 0;
}

static void make_payload(AtomicPayload *p, const KV *kv) {
        *p = (AtomicPayload){};
        for (; kv && kv->path; kv++)
                assert_int_equal(atomic_payload_add(p, kv->path, kv->data, strlen(kv->data),
                                                    kv->mode ? kv->mode : 0644, ATOMIC_UID_NONE),
                                 0);
}

static int write_kv(const KV *kv, const AtomicWriteOptions *o, bool *changed) {
        AtomicPayload p;
        char *reason = NULL;
        int r;

        make_payload(&p, kv);
        r = atomic_write(dir_fd, &p, o, changed, &reason);
        if (r < 0)
                assert_non_null(reason);
        free(reason);
        atomic_payload_done(&p);
        return r;
}

static char *read_visible(const char *path) {
        char full[600];
        static char buf[256];
        ssize_t k;
        int fd;

        snprintf(full, sizeof full, "%s/%s", dir, path);
        fd = open(full, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k < 0)
                return NULL;
        buf[k] = '\0';
        return buf;
}

static char *data_target(void) {
        static char buf[256];
        ssize_t k = readlinkat(dir_fd, "..data", buf, sizeof buf - 1);
        if (k < 0)
                return NULL;
        buf[k] = '\0';
        return buf;
}

/* The entries of the volume directory that start with "..2": versions. */
static int count_versions(void) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int n = 0;

        assert_non_null(d);
        while ((de = readdir(d)))
                if (strncmp(de->d_name, "..2", 3) == 0)
                        n++;
        closedir(d);
        return n;
}

static bool exists_nofollow(const char *name) {
        struct stat st;
        return fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Exactly kv is visible: each path reads its data with its mode, and the
 * top-level names are "<name> -> ..data/<name>" symlinks. */
static void assert_visible(const KV *kv) {
        for (; kv->path; kv++) {
                char full[600], link[700], want[700];
                struct stat st;
                const char *data = read_visible(kv->path);
                size_t top = strcspn(kv->path, "/");
                ssize_t k;

                if (!data)
                        fail_msg("%s not readable", kv->path);
                assert_string_equal(data, kv->data);
                snprintf(full, sizeof full, "%s/%s", dir, kv->path);
                assert_int_equal(stat(full, &st), 0);
                assert_int_equal(st.st_mode & 07777, kv->mode ? kv->mode : 0644);
                snprintf(full, sizeof full, "%.*s", (int) top, kv->path);
                k = readlinkat(dir_fd, full, link, sizeof link - 1);
                assert_true(k > 0);
                link[k] = '\0';
                snprintf(want, sizeof want, "..data/%s", full);
                assert_string_equal(link, want);
        }
        assert_int_equal(count_versions(), 1);
        assert_false(exists_nofollow("..data_tmp"));
}

/* The paths of kv read their data (the child of a test cannot assert). */
static bool is_visible_exactly(const KV *kv) {
        for (; kv->path; kv++)
                if (!streq_ptr(read_visible(kv->path), kv->data))
                        return false;
        return true;
}

/* ---- kubelet's validatePath ---------------------------------------------- */

static void test_validate_path(void **state) {
        char long_path[4200], long_name[300];
        static const struct {
                const char *path;
                bool valid;
        } cases[] = {
                { "i/am/well/behaved.txt", true },
                { "keepyourheaddownandfollowtherules.txt", true },
                { ".dotfile", true },
                { "foo////bar", true },
                { "a/..b", true },
                { "/dev/null", false },
                { "..sneaky.txt", false },
                { "..data", false },
                { "./..data", false },
                { "..", false },
                { "../x", false },
                { "x/../../y", false },
                { "hello/there/../../../../../../etc/passwd", false },
                { "hello/../etc/somethingbad", false },
                { "", false },
                { ".", false },
                { "./", false },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *reason = NULL;
                int r = atomic_payload_validate_path(cases[i].path, &reason);
                if (cases[i].valid ? r != 0 : r != -EINVAL)
                        fail_msg("\"%s\": %d (%s)", cases[i].path, r, strempty(reason));
                assert_true(cases[i].valid ? reason == NULL : reason != NULL);
        }
        memset(long_path, 'a', 4097);
        for (size_t i = 200; i < 4097; i += 200)
                long_path[i] = '/';
        long_path[4097] = '\0';
        assert_int_equal(atomic_payload_validate_path(long_path, NULL), -EINVAL);
        long_path[4096] = '\0';
        assert_int_equal(atomic_payload_validate_path(long_path, NULL), 0);
        memset(long_name, 'a', 256);
        long_name[256] = '\0';
        assert_int_equal(atomic_payload_validate_path(long_name, NULL), -EINVAL);
        long_name[255] = '\0';
        assert_int_equal(atomic_payload_validate_path(long_name, NULL), 0);
}

/* ---- writes and updates, kubelet's TestWriteOnce / TestUpdate -------------- */

static void test_write_once_table(void **state) {
        static const KV basic[] = { { "foo", "foo" }, { "bar", "bar" }, {} };
        static const KV modes[] = { { "foo", "foo", 0407 },
                                    { "bar", "bar", 0440 },
                                    { ".dotfile", "dotfile", 0777 },
                                    { ".dotfile.file", "dotfile.file", 0666 },
                                    {} };
        static const KV nested[] = { { "foo/bar.txt", "foo/bar" },
                                     { "bar/zab.txt", "bar/zab.txt" },
                                     { "foo/blaz/bar", "foo/blaz/bar", 0400 },
                                     { "empty", "" },
                                     {} };
        static const KV *table[] = { basic, modes, nested };

        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                bool changed = false;

                reset_dir();
                assert_int_equal(write_kv(table[i], NULL, &changed), 0);
                assert_true(changed);
                assert_visible(table[i]);
                assert_int_equal(strncmp(data_target(), "..", 2), 0);
        }
}

static void test_update_table(void **state) {
        static const struct {
                const char *name;
                KV first[4], next[4];
                const char *gone[3];
        } cases[] = {
                { "update",
                  { { "foo", "foo" }, { "bar", "bar" } },
                  { { "foo", "foo2" }, { "bar", "bar" } },
                  {} },
                { "add", { { "foo", "foo" } }, { { "foo", "foo" }, { "bar/baz", "baz" } }, {} },
                { "delete", { { "foo", "foo" }, { "bar", "bar" } }, { { "foo", "foo" } }, { "bar" } },
                { "delete nested", { { "foo/a", "a" }, { "bar/b", "b" } }, { { "foo/a", "a" } }, { "bar" } },
                { "delete all", { { "foo", "foo" }, { "bar", "bar" } }, {}, { "foo", "bar" } },
                { "dir becomes file",
                  { { "foo/bar", "x" }, { "keep", "k" } },
                  { { "foo", "now a file" }, { "keep", "k" } },
                  {} },
                { "file becomes dir", { { "foo", "a file" } }, { { "foo/bar", "now in a dir" } }, {} },
                { "mode only", { { "foo", "foo", 0644 } }, { { "foo", "foo", 0600 } }, {} },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *first = NULL;
                bool changed = false;

                reset_dir();
                assert_int_equal(write_kv(cases[i].first, NULL, &changed), 0);
                first = strdup(data_target());
                assert_int_equal(write_kv(cases[i].next, NULL, &changed), 0);
                if (!changed)
                        fail_msg("%s: not changed", cases[i].name);
                assert_string_not_equal(first, data_target());
                assert_visible(cases[i].next);
                for (size_t g = 0; g < ELEMENTSOF(cases[i].gone) && cases[i].gone[g]; g++)
                        if (exists_nofollow(cases[i].gone[g]))
                                fail_msg("%s: %s still there", cases[i].name, cases[i].gone[g]);
        }
}

static void test_multiple_updates_and_noop(void **state) {
        static const KV v[4][3] = {
                { { "foo", "foo" }, { "bar", "bar" } },
                { { "foo", "foo2" }, { "bar", "bar2" } },
                { { "foo", "foo3" }, { "bar", "bar3" } },
                { { "foo", "foo4" }, { "bar", "bar4" } },
        };
        struct stat before, after;
        char target[256];
        bool changed;

        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                assert_int_equal(write_kv(v[i], NULL, &changed), 0);
                assert_true(changed);
                assert_visible(v[i]);
        }
        /* The same payload again: nothing written, the same version, the same inodes. */
        snprintf(target, sizeof target, "%s", data_target());
        assert_int_equal(fstatat(dir_fd, "..data/foo", &before, 0), 0);
        assert_int_equal(write_kv(v[3], NULL, &changed), 0);
        assert_false(changed);
        assert_string_equal(target, data_target());
        assert_int_equal(fstatat(dir_fd, "..data/foo", &after, 0), 0);
        assert_int_equal(before.st_ino, after.st_ino);
        assert_int_equal(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
        /* A user-visible symlink lost: put back, without a new version. */
        assert_int_equal(unlinkat(dir_fd, "bar", 0), 0);
        assert_int_equal(write_kv(v[3], NULL, &changed), 0);
        assert_true(changed);
        assert_string_equal(target, data_target());
        assert_visible(v[3]);
}

static void test_payload_rules(void **state) {
        static const KV dup[] = { { "foo//bar", "first" }, { "./foo/bar", "last" }, {} };
        static const KV dup_result[] = { { "foo/bar", "last" }, {} };
        static const KV clash[] = { { "foo", "f" }, { "foo/bar", "b" }, {} };
        const KV *invalid[] = {
                (const KV[]){ { "/etc/passwd", "x" }, {} }, (const KV[]){ { "..", "x" }, {} },
                (const KV[]){ { "../x", "x" }, {} },        (const KV[]){ { "x/../../y", "x" }, {} },
                (const KV[]){ { "..data", "x" }, {} },      (const KV[]){ { "ok", "x" }, { "", "y" }, {} },
        };
        AtomicPayload p;
        char *reason = NULL;
        bool changed;

        for (size_t i = 0; i < ELEMENTSOF(invalid); i++) {
                make_payload(&p, invalid[i]);
                assert_int_equal(atomic_write(dir_fd, &p, NULL, &changed, &reason), -EINVAL);
                assert_non_null(reason);
                assert_false(changed);
                reason = mfree_str(reason);
                atomic_payload_done(&p);
                /* Nothing written. */
                assert_false(exists_nofollow("..data"));
                assert_false(exists_nofollow("ok"));
                assert_int_equal(count_versions(), 0);
        }
        assert_int_equal(write_kv(clash, NULL, &changed), -EINVAL);
        assert_false(exists_nofollow("..data"));
        assert_int_equal(write_kv(dup, NULL, &changed), 0);
        assert_visible(dup_result);
}

static void test_read_current(void **state) {
        static const KV kv[] = { { "b/c", "c" }, { "a", "a", 0600 }, {} };
        AtomicPayload p;

        assert_int_equal(atomic_read_current(dir_fd, &p), 0);
        assert_int_equal(p.n, 0);
        assert_int_equal(write_kv(kv, NULL, NULL), 0);
        assert_int_equal(atomic_read_current(dir_fd, &p), 0);
        assert_int_equal(p.n, 2);
        assert_string_equal(p.files[0].path, "a");
        assert_int_equal(p.files[0].mode, 0600);
        assert_int_equal(p.files[0].size, 1);
        assert_memory_equal(p.files[0].data, "a", 1);
        assert_string_equal(p.files[1].path, "b/c");
        assert_int_equal(p.files[1].mode, 0644);
        atomic_payload_done(&p);
}

/* A volume kubelet wrote (a node taken over): the same payload is not
 * rewritten, a new one replaces kubelet's version like one of ours. */
static void test_adopts_kubelets_layout(void **state) {
        static const KV kv[] = { { "foo", "foo" }, { "k8s/annotations", "a=b" }, {} };
        static const KV kv2[] = { { "foo", "foo2" }, {} };
        const char *version = "..2016_02_01_15_04_05.12345678";
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), f;
        char path[300];
        bool changed;

        assert_true(fd >= 0);
        assert_int_equal(mkdirat(fd, version, 0755), 0);
        snprintf(path, sizeof path, "%s/k8s", version);
        assert_int_equal(mkdirat(fd, path, 0755), 0);
        for (const KV *k = kv; k->path; k++) {
                snprintf(path, sizeof path, "%s/%s", version, k->path);
                f = openat(fd, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                assert_true(f >= 0);
                assert_int_equal(write(f, k->data, strlen(k->data)), (ssize_t) strlen(k->data));
                assert_int_equal(fchmod(f, 0644), 0);
                close(f);
        }
        assert_int_equal(symlinkat(version, fd, "..data"), 0);
        assert_int_equal(symlinkat("..data/foo", fd, "foo"), 0);
        assert_int_equal(symlinkat("..data/k8s", fd, "k8s"), 0);
        close(fd);

        assert_int_equal(write_kv(kv, NULL, &changed), 0);
        assert_false(changed);
        assert_string_equal(data_target(), version);
        assert_visible(kv);
        assert_int_equal(write_kv(kv2, NULL, &changed), 0);
        assert_true(changed);
        assert_visible(kv2);
        assert_false(exists_nofollow("k8s"));
        assert_false(exists_nofollow(version));
}

/* A version holding what the writer never makes (a symlink planted in it) is
 * not read through, and is replaced by the next write. */
static void test_planted_inside_version(void **state) {
        static const KV kv[] = { { "foo", "foo" }, {} };
        char secret[400], path[400];
        AtomicPayload p;
        bool changed;
        int fd;

        snprintf(secret, sizeof secret, "%s/secret", outside);
        fd = open(secret, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_int_equal(write(fd, "foo", 3), 3);
        close(fd);
        assert_int_equal(write_kv(kv, NULL, NULL), 0);
        snprintf(path, sizeof path, "%s/..data/foo", dir);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(symlink(secret, path), 0);
        assert_int_equal(atomic_read_current(dir_fd, &p), -EUCLEAN);
        /* The bytes behind the symlink equal the payload's: still rewritten. */
        assert_int_equal(write_kv(kv, NULL, &changed), 0);
        assert_true(changed);
        assert_visible(kv);
        assert_int_equal(lstat(path, &(struct stat){}), 0);
        assert_int_equal(atomic_read_current(dir_fd, &p), 0);
        assert_int_equal(p.n, 1);
        atomic_payload_done(&p);
        assert_int_equal(access(secret, F_OK), 0);
}

/* ---- what is there before ---------------------------------------------- */

static void test_leftover_data_tmp(void **state) {
        static const KV kv[] = { { "foo", "foo" }, {} };
        static const KV kv2[] = { { "foo", "foo2" }, {} };
        char *orphan = "..2020_01_01_00_00_00.1";
        bool changed;

        assert_int_equal(write_kv(kv, NULL, &changed), 0);
        /* A crash after the new version and its "..data_tmp", before the rename. */
        {
                int fd = open(dir, O_RDONLY | O_DIRECTORY), f;
                assert_int_equal(mkdirat(fd, orphan, 0755), 0);
                f = openat(fd, "..2020_01_01_00_00_00.1/foo", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
                assert_true(f >= 0);
                close(f);
                assert_int_equal(symlinkat(orphan, fd, "..data_tmp"), 0);
                close(fd);
        }
        /* Unchanged payload: nothing written, the leftovers removed. */
        assert_int_equal(write_kv(kv, NULL, &changed), 0);
        assert_false(changed);
        assert_visible(kv);
        /* Again, then a changed payload. */
        {
                int fd = open(dir, O_RDONLY | O_DIRECTORY);
                assert_int_equal(symlinkat(orphan, fd, "..data_tmp"), 0);
                assert_int_equal(mkdirat(fd, orphan, 0755), 0);
                close(fd);
        }
        assert_int_equal(write_kv(kv2, NULL, &changed), 0);
        assert_true(changed);
        assert_visible(kv2);
}

static void test_planted_symlinks_not_followed(void **state) {
        static const KV kv[] = { { "foo", "ours" }, { "sub/x", "ours too" }, {} };
        char secret[400], target[400];
        struct stat st;
        int fd = open(dir, O_RDONLY | O_DIRECTORY), o;

        /* A host file the pod must never reach nor change. */
        snprintf(secret, sizeof secret, "%s/secret", outside);
        o = open(secret, O_WRONLY | O_CREAT, 0600);
        assert_int_equal(write(o, "host", 4), 4);
        close(o);
        assert_int_equal(symlinkat(secret, fd, "foo"), 0);
        assert_int_equal(symlinkat(outside, fd, "sub"), 0);
        assert_int_equal(symlinkat(outside, fd, "..data_tmp"), 0);
        assert_int_equal(symlinkat(outside, fd, "..data"), 0);
        /* A symlink of no key, not ours: left alone. */
        assert_int_equal(symlinkat(secret, fd, "other"), 0);
        close(fd);

        assert_int_equal(write_kv(kv, NULL, NULL), 0);
        assert_visible(kv);
        assert_string_equal(read_visible("../outside/secret"), "host");
        assert_int_equal(stat(outside, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        snprintf(target, sizeof target, "%s/x", outside);
        assert_int_not_equal(access(target, F_OK), 0);
        assert_true(exists_nofollow("other"));
        /* Removing every key leaves "other", which is not ours. */
        assert_int_equal(write_kv((const KV[]){ {} }, NULL, NULL), 0);
        assert_true(exists_nofollow("other"));
        assert_false(exists_nofollow("foo"));
        assert_string_equal(read_visible("../outside/secret"), "host");
}

static void test_user_file_not_clobbered(void **state) {
        static const KV first[] = { { "keep", "k" }, {} };
        static const KV kv[] = { { "keep", "k2" }, { "mine", "x" }, {} };
        static const KV kv_dir[] = { { "keep", "k2" }, { "adir/x", "x" }, {} };
        _cleanup_free_ char *before = NULL;
        AtomicPayload p;
        char *reason = NULL;
        char path[400];
        int fd;

        assert_int_equal(write_kv(first, NULL, NULL), 0);
        before = strdup(data_target());
        snprintf(path, sizeof path, "%s/mine", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_int_equal(write(fd, "user", 4), 4);
        close(fd);
        snprintf(path, sizeof path, "%s/adir", dir);
        assert_int_equal(mkdir(path, 0755), 0);

        make_payload(&p, kv);
        assert_int_equal(atomic_write(dir_fd, &p, NULL, NULL, &reason), -EEXIST);
        assert_non_null(strstr(reason, "mine"));
        reason = mfree_str(reason);
        atomic_payload_done(&p);
        assert_string_equal(read_visible("mine"), "user");
        /* Refused before anything was written: the old version is whole. */
        assert_string_equal(before, data_target());
        assert_visible(first);

        assert_int_equal(write_kv(kv_dir, NULL, NULL), -EEXIST);
        assert_string_equal(before, data_target());
        snprintf(path, sizeof path, "%s/adir/x", dir);
        assert_int_not_equal(access(path, F_OK), 0);
}

/* ---- ownership ------------------------------------------------------------ */

typedef struct SwapCheck {
        const char *old;
        int checked, wrong;
} SwapCheck;

/* At every step: once "..data" names a new version, its files must already
 * have the group and modes: the ownership came before the swap. */
static void check_swap(const char *relpath, AtomicChange kind, void *userdata) {
        SwapCheck *c = userdata;
        const char *t = data_target();
        const char *files[] = { "..data/foo", "..data/d/bar" };
        struct stat st;

        if (!t || streq(t, c->old))
                return;
        c->checked++;
        for (size_t i = 0; i < ELEMENTSOF(files); i++)
                if (fstatat(dir_fd, files[i], &st, 0) < 0 || st.st_gid != GID || (st.st_mode & 0440) != 0440)
                        c->wrong++;
        if (fstatat(dir_fd, "..data/d", &st, 0) < 0 || st.st_gid != GID || (st.st_mode & 07777) != 02755)
                c->wrong++;
}

static void test_fsgroup_before_swap(void **state) {
        static const KV first[] = { { "foo", "1" }, {} };
        static const KV kv[] = { { "foo", "2", 0600 }, { "d/bar", "b", 0400 }, {} };
        _cleanup_free_ char *old = NULL;
        SwapCheck c = {};
        AtomicWriteOptions o = {
                .has_fs_group = true, .fs_group = GID, .note_changed = check_swap, .userdata = &c
        };
        struct stat st;
        bool changed;

        if (geteuid() != 0)
                skip();
        assert_int_equal(write_kv(first, NULL, NULL), 0);
        old = strdup(data_target());
        c.old = old;
        assert_int_equal(write_kv(kv, &o, &changed), 0);
        assert_true(changed);
        assert_true(c.checked > 0);
        assert_int_equal(c.wrong, 0);
        assert_int_equal(fstatat(dir_fd, "..data/foo", &st, 0), 0);
        assert_int_equal(st.st_gid, GID);
        assert_int_equal(st.st_mode & 07777, 0640);
        assert_int_equal(fstatat(dir_fd, "..data/d/bar", &st, 0), 0);
        assert_int_equal(st.st_mode & 07777, 0440);
        assert_int_equal(fstatat(dir_fd, "", &st, AT_EMPTY_PATH), 0);
        assert_int_equal(st.st_gid, GID);
        assert_int_equal(st.st_mode & 07777, 02750 | 0550);
        /* The same payload and group: nothing to write. */
        o.note_changed = NULL;
        assert_int_equal(write_kv(kv, &o, &changed), 0);
        assert_false(changed);
        /* Another group: a new version. */
        o.fs_group = GID + 1;
        assert_int_equal(write_kv(kv, &o, &changed), 0);
        assert_true(changed);
        assert_int_equal(fstatat(dir_fd, "..data/foo", &st, 0), 0);
        assert_int_equal(st.st_gid, GID + 1);
}

static void test_file_owner(void **state) {
        AtomicPayload p = {};
        struct stat st;
        bool changed;

        if (geteuid() != 0)
                skip();
        assert_int_equal(atomic_payload_add(&p, "token", "t", 1, 0600, UID), 0);
        assert_int_equal(atomic_write(dir_fd, &p, NULL, &changed, NULL), 0);
        assert_int_equal(fstatat(dir_fd, "token", &st, 0), 0);
        assert_int_equal(st.st_uid, UID);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(atomic_write(dir_fd, &p, NULL, &changed, NULL), 0);
        assert_false(changed);
        p.files[0].uid = UID + 1;
        assert_int_equal(atomic_write(dir_fd, &p, NULL, &changed, NULL), 0);
        assert_true(changed);
        atomic_payload_done(&p);
}

/* A mount inside the old version (a bind of the same file system: the same
 * st_dev) is never entered: the old version is left, the host's files under
 * the mount are whole, the new version is in place. */
static void test_mount_in_old_version_not_entered(void **state) {
        static const KV first[] = { { "sub/x", "x" }, {} };
        static const KV next[] = { { "y", "y" }, {} };
        static const KV third[] = { { "z", "z" }, {} };
        char precious[400];
        int status, fd;
        pid_t pid;

        if (geteuid() != 0)
                skip();
        snprintf(precious, sizeof precious, "%s/precious", outside);
        fd = open(precious, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(write_kv(first, NULL, NULL), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char sub[700];
                int r;

                /* A private mount namespace: nothing leaks to the host. */
                if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                        _exit(3);
                snprintf(sub, sizeof sub, "%s/%s/sub", dir, data_target());
                if (mount(outside, sub, NULL, MS_BIND, NULL) < 0)
                        _exit(4);
                /* A descriptor opened before unshare() resolves in the old namespace. */
                close(dir_fd);
                dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
                r = write_kv(next, NULL, NULL);
                if (r != -EBUSY)
                        _exit(5);
                if (!is_visible_exactly(next))
                        _exit(6);
                if (access(precious, F_OK) < 0)
                        _exit(7);
                /* The stuck leftover does not hold the next update back. */
                if (write_kv(third, NULL, NULL) != -EBUSY || !is_visible_exactly(third))
                        _exit(8);
                if (access(precious, F_OK) < 0)
                        _exit(9);
                _exit(0);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 3 || WEXITSTATUS(status) == 4)
                skip();
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(access(precious, F_OK), 0);
        /* Without the mount, the next write removes the old version. */
        assert_int_equal(write_kv(next, NULL, NULL), 0);
        assert_visible(next);
}

static void test_clear(void **state) {
        static const KV kv[] = { { "a", "a" }, { "b/c", "c" }, {} };
        char path[400];
        int fd;

        assert_int_equal(write_kv(kv, NULL, NULL), 0);
        snprintf(path, sizeof path, "%s/users-file", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(atomic_clear(dir_fd, NULL, NULL), 0);
        assert_false(exists_nofollow("a"));
        assert_false(exists_nofollow("b"));
        assert_false(exists_nofollow("..data"));
        assert_int_equal(count_versions(), 0);
        /* Not the writer's: left, and the caller's rmdir says so. */
        assert_true(exists_nofollow("users-file"));
        assert_int_equal(rmdir(dir), -1);
        assert_int_equal(errno, ENOTEMPTY);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(rmdir(dir), 0);
        assert_int_equal(mkdir(dir, 0750), 0);
}

/* ---- durability notes --------------------------------------------------- */

typedef struct Notes {
        char files[16][300];
        int n_files, n_root;
} Notes;

static void collect(const char *relpath, AtomicChange kind, void *userdata) {
        Notes *n = userdata;

        if (kind == ATOMIC_CHANGED_FILE && n->n_files < 16)
                snprintf(n->files[n->n_files++], sizeof n->files[0], "%s", relpath);
        if (kind == ATOMIC_CHANGED_DIR && streq(relpath, ""))
                n->n_root++;
}

static void test_notes(void **state) {
        static const KV kv[] = { { "a", "a" }, { "d/b", "b" }, {} };
        Notes n = {};
        AtomicWriteOptions o = { .note_changed = collect, .userdata = &n, .sync = true };
        char want[300];

        assert_int_equal(write_kv(kv, &o, NULL), 0);
        assert_int_equal(n.n_files, 2);
        snprintf(want, sizeof want, "%s/a", data_target());
        assert_string_equal(n.files[0], want);
        snprintf(want, sizeof want, "%s/d/b", data_target());
        assert_string_equal(n.files[1], want);
        assert_true(n.n_root >= 3); /* the version, the links, the swap */
        n = (Notes){};
        assert_int_equal(write_kv(kv, &o, NULL), 0);
        assert_int_equal(n.n_files, 0);
        assert_int_equal(n.n_root, 0);
}

/* ---- crash at every step ------------------------------------------------- */

static const KV v1[] = { { "a", "a1" }, { "b/c", "c1" }, { "d", "d1" }, {} };
static const KV v2[] = { { "a", "a2" }, { "b/c", "c2" }, { "e", "e2" }, {} };
static const char *all_paths[] = { "a", "b/c", "d", "e" };

static int kill_at;
static void kill_at_step(const char *relpath, AtomicChange kind, void *userdata) {
        if (--kill_at == 0)
                raise(SIGKILL);
}

/* What resolves through the volume is one version, whole: v1's or v2's. */
static bool is_version(const KV *v) {
        for (size_t i = 0; i < ELEMENTSOF(all_paths); i++) {
                const char *got = read_visible(all_paths[i]), *want = NULL;

                for (const KV *k = v; k->path; k++)
                        if (streq(k->path, all_paths[i]))
                                want = k->data;
                if (!streq_ptr(got, want))
                        return false;
        }
        return true;
}

static void test_crash_at_every_step(void **state) {
        int step;

        for (step = 1; step < 200; step++) {
                int status;
                pid_t pid;

                reset_dir();
                assert_int_equal(write_kv(v1, NULL, NULL), 0);
                pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        AtomicWriteOptions o = { .note_changed = kill_at_step };
                        kill_at = step;
                        _exit(write_kv(v2, &o, NULL) == 0 ? 0 : 1);
                }
                assert_int_equal(waitpid(pid, &status, 0), pid);
                if (!is_version(v1) && !is_version(v2))
                        fail_msg("killed at step %d: neither the old nor the new version visible", step);
                /* The next write completes it and leaves nothing behind. */
                assert_int_equal(write_kv(v2, NULL, NULL), 0);
                assert_visible(v2);
                assert_false(exists_nofollow("d"));
                assert_false(exists_nofollow("..link_tmp"));
                if (WIFEXITED(status)) {
                        assert_int_equal(WEXITSTATUS(status), 0);
                        break;
                }
                assert_true(WIFSIGNALED(status));
        }
        /* Every step of a write with an update, an addition and a removal was tried. */
        assert_true(step > 8);
        assert_true(step < 200);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_validate_path),
                cmocka_unit_test_setup(test_write_once_table, each_setup),
                cmocka_unit_test_setup(test_update_table, each_setup),
                cmocka_unit_test_setup(test_multiple_updates_and_noop, each_setup),
                cmocka_unit_test_setup(test_payload_rules, each_setup),
                cmocka_unit_test_setup(test_read_current, each_setup),
                cmocka_unit_test_setup(test_leftover_data_tmp, each_setup),
                cmocka_unit_test_setup(test_adopts_kubelets_layout, each_setup),
                cmocka_unit_test_setup(test_planted_inside_version, each_setup),
                cmocka_unit_test_setup(test_planted_symlinks_not_followed, each_setup),
                cmocka_unit_test_setup(test_user_file_not_clobbered, each_setup),
                cmocka_unit_test_setup(test_fsgroup_before_swap, each_setup),
                cmocka_unit_test_setup(test_file_owner, each_setup),
                cmocka_unit_test_setup(test_mount_in_old_version_not_entered, each_setup),
                cmocka_unit_test_setup(test_clear, each_setup),
                cmocka_unit_test_setup(test_notes, each_setup),
                cmocka_unit_test_setup(test_crash_at_every_step, each_setup),
        };
        if (getenv("KVOLUMED_TEST_DEBUG"))
                log_set_max_level(LOG_DEBUG);
        return cmocka_run_group_tests(tests, setup, teardown);
}
