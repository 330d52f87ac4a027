/* SPDX-License-Identifier: Apache-2.0 */
/* volume/host against the kernel: subPath binds, their cleanup, hostPath
 * types, tmpfs and the shared root-dir.  Needs root; runs in a private mount
 * namespace of its own (unshare in setup), so nothing reaches the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "volume/host/beneath.h"
#include "volume/host/hostpathtype.h"
#include "volume/host/rootshared.h"
#include "volume/host/subpath.h"
#include "volume/host/tmpfs.h"

static char base[] = "/tmp/kv-host-XXXXXX";
static char vol[200], pod[200];
static int vol_fd = -1, pod_fd = -1;

/* How many mounts have exactly this mount point. */
static int mounts_at(const char *path) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[4096], target[4096];
        int n = 0;
        assert_non_null(f);
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "%*s %*s %*s %*s %4095s", target) == 1 && strcmp(target, path) == 0)
                        n++;
        fclose(f);
        return n;
}

/* The optional fields of the top mount at path ("" when none). */
static bool mount_is_shared(const char *path) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[4096], target[4096];
        bool shared = false;
        assert_non_null(f);
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "%*s %*s %*s %*s %4095s", target) == 1 && strcmp(target, path) == 0)
                        shared = strstr(line, " shared:") != NULL; /* the last (top) one wins */
        fclose(f);
        return shared;
}

static bool any_mount_below(const char *prefix) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[4096], target[4096];
        bool found = false;
        if (!f)
                return true;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "%*s %*s %*s %*s %4095s", target) == 1 &&
                    strncmp(target, prefix, strlen(prefix)) == 0)
                        found = true;
        fclose(f);
        return found;
}

static void unmount_all_below(const char *prefix) {
        for (int again = 1, rounds = 0; again && rounds < 100; rounds++) {
                FILE *f = fopen("/proc/self/mountinfo", "re");
                char line[4096], target[4096];
                again = 0;
                if (!f)
                        return;
                while (fgets(line, sizeof line, f))
                        if (sscanf(line, "%*s %*s %*s %*s %4095s", target) == 1 &&
                            strncmp(target, prefix, strlen(prefix)) == 0 && umount2(target, MNT_DETACH) == 0)
                                again = 1;
                fclose(f);
        }
}

static void write_file(const char *path, const char *content) {
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        fputs(content, f);
        assert_int_equal(fclose(f), 0);
}

static int setup(void **state) {
        if (geteuid() != 0)
                return 0;
        if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
                return -1;
        umask(022);
        return 0;
}

static int each_setup(void **state) {
        if (geteuid() != 0)
                return 0;
        strcpy(base, "/tmp/kv-host-XXXXXX");
        if (!mkdtemp(base))
                return -1;
        snprintf(vol, sizeof vol, "%s/volume", base);
        snprintf(pod, sizeof pod, "%s/pods/0b2f2c5e-1d3a-4c7e-9f00-5a6b7c8d9e0f", base);
        char pods[220];
        snprintf(pods, sizeof pods, "%s/pods", base);
        if (mkdir(vol, 0755) < 0 || mkdir(pods, 0750) < 0 || mkdir(pod, 0750) < 0)
                return -1;
        vol_fd = open(vol, O_PATH | O_DIRECTORY | O_CLOEXEC);
        pod_fd = open(pod, O_PATH | O_DIRECTORY | O_CLOEXEC);
        return vol_fd >= 0 && pod_fd >= 0 ? 0 : -1;
}

/* The same, walking by hand as where openat2 is missing (valgrind). */
static int each_setup_by_hand(void **state) {
        beneath_test_no_openat2 = true;
        return each_setup(state);
}

static int each_teardown(void **state) {
        char cmd[300];
        beneath_test_no_openat2 = false;
        if (geteuid() != 0)
                return 0;
        subpath_test_after_resolve = NULL;
        close(vol_fd);
        close(pod_fd);
        unmount_all_below(base);
        /* Never delete through a bind that could not be unmounted (one of
         * /etc, were the code under test wrong): leave the directory. */
        if (any_mount_below(base))
                return -1;
        snprintf(cmd, sizeof cmd, "rm -rf --one-file-system '%s'", base);
        return system(cmd) == 0 ? 0 : -1;
}

static SubpathRequest req(const char *subpath, const char *container, unsigned index) {
        return (SubpathRequest){
                .volume_fd = vol_fd,
                .volume_path = vol,
                .pod_dir_fd = pod_fd,
                .pod_dir_path = pod,
                .volume_name = "data",
                .container_name = container,
                .index = index,
                .subpath = subpath,
        };
}

static void assert_same_inode(const char *a, const char *b) {
        struct stat sa, sb;
        assert_int_equal(stat(a, &sa), 0);
        assert_int_equal(stat(b, &sb), 0);
        assert_true(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

#define NEED_ROOT()                                                                                         \
        do {                                                                                                \
                if (geteuid() != 0)                                                                         \
                        skip();                                                                             \
        } while (0)

static void test_subpath_binds_a_directory(void **state) {
        char path[400], want[400], *bind = NULL;
        SubpathRequest r = req("a/b", "app", 0);
        NEED_ROOT();

        snprintf(path, sizeof path, "%s/a", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/a/b", vol);
        assert_int_equal(mkdir(path, 0700), 0);
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        snprintf(want, sizeof want, "%s/volume-subpaths/data/app/0", pod);
        assert_string_equal(bind, want);
        assert_same_inode(bind, path);
        assert_int_equal(mounts_at(bind), 1);
        /* Written through the bind, seen in the volume. */
        snprintf(path, sizeof path, "%s/hello", bind);
        write_file(path, "hi");
        snprintf(path, sizeof path, "%s/a/b/hello", vol);
        assert_int_equal(access(path, F_OK), 0);
        free(bind);

        /* Again: the same bind, not a second one. */
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        assert_int_equal(mounts_at(want), 1);
        free(bind);

        /* A bind of something else there (an edited pod, a crash): replaced. */
        snprintf(path, sizeof path, "%s/other", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        r.subpath = "other";
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        assert_same_inode(want, path);
        assert_int_equal(mounts_at(want), 1);
        free(bind);

        /* Read-only when asked. */
        r.index = 1;
        r.read_only = true;
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        snprintf(path, sizeof path, "%s/nope", bind);
        assert_true(open(path, O_CREAT | O_WRONLY, 0644) < 0 && errno == EROFS);
        free(bind);
}

/* A read-only subPath of a volume mounted nosuid,nodev,noexec keeps them. */
static void test_subpath_read_only_keeps_the_volume_flags(void **state) {
        char *bind = NULL;
        struct statvfs sv;
        SubpathRequest r;
        NEED_ROOT();

        assert_int_equal(mount("tmpfs", vol, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m"), 0);
        close(vol_fd);
        vol_fd = open(vol, O_PATH | O_DIRECTORY | O_CLOEXEC);
        assert_true(vol_fd >= 0);
        r = req("sub/", "app", 0); /* a trailing '/': still "sub" */
        r.read_only = true;
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        assert_int_equal(statvfs(bind, &sv), 0);
        assert_true(sv.f_flag & ST_RDONLY);
        assert_true(sv.f_flag & ST_NOSUID);
        assert_true(sv.f_flag & ST_NODEV);
        assert_true(sv.f_flag & ST_NOEXEC);
        char sub[400];
        snprintf(sub, sizeof sub, "%s/sub", vol);
        assert_same_inode(bind, sub);
        free(bind);
}

static void test_subpath_binds_a_file_and_follows_inner_links(void **state) {
        char path[400], link[400], *bind = NULL;
        struct stat st;
        SubpathRequest r = req("conf/app.ini", "app", 3);
        NEED_ROOT();

        snprintf(path, sizeof path, "%s/conf", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/conf/app.ini", vol);
        write_file(path, "x=1\n");
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        assert_int_equal(lstat(bind, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_same_inode(bind, path);
        assert_int_equal(mounts_at(bind), 1);
        free(bind);

        /* A relative symlink that stays in the volume is followed, as kubelet does. */
        snprintf(link, sizeof link, "%s/current", vol);
        assert_int_equal(symlink("conf", link), 0);
        r = req("current/app.ini", "app", 4);
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        assert_same_inode(bind, path);
        free(bind);
}

static void test_subpath_missing_is_created_with_the_volume_mode(void **state) {
        char path[400], *bind = NULL;
        struct stat st;
        SubpathRequest r = req("logs/web-0", "app", 0);
        NEED_ROOT();

        assert_int_equal(chmod(vol, 02775), 0);
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        snprintf(path, sizeof path, "%s/logs", vol);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 02775); /* past the umask, as SafeMakeDir's fchmod */
        snprintf(path, sizeof path, "%s/logs/web-0", vol);
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 02775);
        assert_same_inode(bind, path);
        free(bind);
}

static void refused_escape(const char *subpath, const char *through) {
        char *bind = NULL, *err = NULL, want[300];
        SubpathRequest r = req(subpath, "app", 7);

        assert_int_equal(subpath_prepare(&r, &bind, &err), -EXDEV);
        assert_null(bind);
        snprintf(want, sizeof want,
                 "subPath '%s' of volume 'data' resolves outside the volume (through symlink '%s')", subpath,
                 through);
        assert_string_equal(err, want);
        free(err);
}

static void test_subpath_refuses_links_out_of_the_volume(void **state) {
        char path[400], bind[400];
        NEED_ROOT();

        snprintf(path, sizeof path, "%s/etc", vol);
        assert_int_equal(symlink("/etc", path), 0);
        snprintf(path, sizeof path, "%s/up", vol);
        assert_int_equal(symlink("../..", path), 0);
        snprintf(path, sizeof path, "%s/d", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/d/passwd", vol);
        assert_int_equal(symlink("/etc/passwd", path), 0);

        /* A loop inside, and a magic link: refused too. */
        snprintf(path, sizeof path, "%s/loop1", vol);
        assert_int_equal(symlink("loop2", path), 0);
        snprintf(path, sizeof path, "%s/loop2", vol);
        assert_int_equal(symlink("loop1", path), 0);
        {
                char *bound = NULL, *err = NULL;
                SubpathRequest r = req("loop1/x", "app", 8);
                assert_int_equal(subpath_prepare(&r, &bound, &err), -ELOOP);
                assert_string_equal(
                        err, "subPath 'loop1/x' of volume 'data' cannot be resolved (a symlink loop or "
                             "a magic link at 'loop1')");
                free(err);
                assert_null(bound);
                /* A /proc inside the volume: its magic links are not followed. */
                snprintf(path, sizeof path, "%s/p", vol);
                assert_int_equal(mkdir(path, 0755), 0);
                assert_int_equal(mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), 0);
                r = req("p/self/root/etc", "app", 8);
                assert_int_equal(subpath_prepare(&r, &bound, &err), -ELOOP);
                assert_string_equal(err, "subPath 'p/self/root/etc' of volume 'data' cannot be resolved (a "
                                         "symlink loop or a magic link at 'p/self/root')");
                free(err);
                assert_null(bound);
                assert_int_equal(umount2(path, 0), 0);
        }

        refused_escape("etc", "etc");
        refused_escape("etc/passwd", "etc");
        refused_escape("up", "up");
        refused_escape("up/tmp", "up");
        refused_escape("d/passwd", "d/passwd");
        /* A missing subPath under a link out: refused, nothing made outside. */
        refused_escape("etc/kv-host-test-never/x", "etc");
        assert_int_equal(access("/etc/kv-host-test-never", F_OK), -1);
        /* Nothing was bound, no target left but the empty directories. */
        snprintf(bind, sizeof bind, "%s/volume-subpaths/data/app/7", pod);
        assert_int_equal(access(bind, F_OK), -1);
}

static void test_subpath_refuses_dotdot_and_absolute(void **state) {
        char *bind = NULL, *err = NULL;
        SubpathRequest r = req("a/../../etc", "app", 0);
        NEED_ROOT();

        assert_int_equal(subpath_prepare(&r, &bind, &err), -EINVAL);
        assert_string_equal(err, "unable to provision SubPath `a/../../etc`: must not contain '..'");
        free(err);
        err = NULL;
        r.subpath = "/etc";
        assert_int_equal(subpath_prepare(&r, &bind, &err), -EINVAL);
        assert_string_equal(err, "error SubPath `/etc` must not be an absolute path");
        free(err);
        err = NULL;
        r.subpath = "ok";
        r.container_name = "../x";
        assert_int_equal(subpath_prepare(&r, &bind, &err), -EINVAL);
        free(err);
        assert_null(bind);
}

/* The path is swapped for a symlink out of the volume after it was resolved:
 * the bind is of the descriptor, so it shows the directory resolved. */
static void swap_to_etc(int fd, void *userdata) {
        char path[400], old[400];
        (void) fd;
        (void) userdata;
        snprintf(path, sizeof path, "%s/a/b", vol);
        snprintf(old, sizeof old, "%s/a/b.old", vol);
        assert_int_equal(rename(path, old), 0);
        assert_int_equal(symlink("/etc", path), 0);
}

static void test_subpath_binds_the_descriptor_not_the_path(void **state) {
        char path[400], marker[400], *bind = NULL;
        SubpathRequest r = req("a/b", "app", 0);
        NEED_ROOT();

        snprintf(path, sizeof path, "%s/a", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/a/b", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(marker, sizeof marker, "%s/a/b/inside", vol);
        write_file(marker, "");

        subpath_test_after_resolve = swap_to_etc;
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        subpath_test_after_resolve = NULL;

        snprintf(path, sizeof path, "%s/a/b.old", vol);
        assert_same_inode(bind, path);
        snprintf(marker, sizeof marker, "%s/inside", bind);
        assert_int_equal(access(marker, F_OK), 0);
        snprintf(marker, sizeof marker, "%s/passwd", bind);
        assert_int_equal(access(marker, F_OK), -1);
        free(bind);

        /* Prepared again now that the path leads out: refused. */
        refused_escape("a/b", "a/b");
}

static void test_subpath_cleanup(void **state) {
        char path[400], junk[400], link[400], *bind = NULL;
        SubpathBind *binds = NULL;
        size_t n = 0;
        SubpathRequest r;
        NEED_ROOT();

        snprintf(path, sizeof path, "%s/dir", vol);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/file", vol);
        write_file(path, "data");
        r = req("dir", "app", 0);
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        free(bind);
        /* A bind stacked on it (a crash of an older agent). */
        snprintf(path, sizeof path, "%s/volume-subpaths/data/app/0", pod);
        assert_int_equal(mount(path, path, "none", MS_BIND, NULL), 0);
        r = req("file", "app", 1);
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        free(bind);
        r = req("dir", "sidecar", 2);
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        free(bind);
        /* Crash leftovers: an empty target never bound, an empty file target. */
        snprintf(path, sizeof path, "%s/volume-subpaths/data/sidecar/3", pod);
        assert_int_equal(mkdir(path, 0750), 0);
        snprintf(path, sizeof path, "%s/volume-subpaths/data/sidecar/4", pod);
        write_file(path, "");
        /* Not ours: a file with data, and a symlink out (never followed). */
        snprintf(junk, sizeof junk, "%s/volume-subpaths/data/sidecar/9", pod);
        write_file(junk, "keep me");
        snprintf(link, sizeof link, "%s/volume-subpaths/data/evil", pod);
        assert_int_equal(symlink("/etc", link), 0);

        assert_int_equal(subpath_list(pod_fd, pod, "data", &binds, &n), 0);
        size_t mounted = 0;
        for (size_t i = 0; i < n; i++)
                mounted += binds[i].mounted;
        assert_int_equal(n, 6);
        assert_int_equal(mounted, 3);
        subpath_binds_free(binds, n);

        assert_int_equal(subpath_cleanup(pod_fd, pod, "data", NULL), -ENOTEMPTY);
        snprintf(path, sizeof path, "%s/volume-subpaths", pod);
        unmount_all_below(path); /* (does nothing when cleanup did its job) */
        assert_int_equal(mounts_at(path), 0);
        snprintf(path, sizeof path, "%s/volume-subpaths/data/app", pod);
        assert_int_equal(access(path, F_OK), -1); /* container dir gone */
        snprintf(path, sizeof path, "%s/volume-subpaths/data/sidecar/3", pod);
        assert_int_equal(access(path, F_OK), -1);
        snprintf(path, sizeof path, "%s/volume-subpaths/data/sidecar/4", pod);
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(access(junk, F_OK), 0); /* left alone */
        assert_int_equal(access("/etc/passwd", F_OK), 0);
        /* The volume's content untouched. */
        snprintf(path, sizeof path, "%s/file", vol);
        assert_int_equal(access(path, F_OK), 0);
        snprintf(path, sizeof path, "%s/dir", vol);
        assert_int_equal(access(path, F_OK), 0);

        /* The operator removes what is not kvolumed's: then all goes. */
        assert_int_equal(unlink(junk), 0);
        assert_int_equal(unlink(link), 0);
        assert_int_equal(subpath_cleanup(pod_fd, pod, "data", NULL), 0);
        snprintf(path, sizeof path, "%s/volume-subpaths", pod);
        assert_int_equal(access(path, F_OK), -1);
        /* Nothing there: fine, and idempotent. */
        assert_int_equal(subpath_cleanup(pod_fd, pod, "data", NULL), 0);
        assert_int_equal(subpath_list(pod_fd, pod, "data", &binds, &n), 0);
        assert_int_equal(n, 0);
}

static void test_subpath_cleanup_pod(void **state) {
        char path[400], *bind = NULL;
        SubpathRequest r = req("x", "app", 0);
        NEED_ROOT();

        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        free(bind);
        r.volume_name = "other";
        assert_int_equal(subpath_prepare(&r, &bind, NULL), 0);
        free(bind);
        /* One volume cleaned: the other's binds stay, so does volume-subpaths. */
        assert_int_equal(subpath_cleanup(pod_fd, pod, "data", NULL), 0);
        snprintf(path, sizeof path, "%s/volume-subpaths/other/app/0", pod);
        assert_int_equal(mounts_at(path), 1);
        assert_int_equal(subpath_cleanup_pod(pod_fd, pod, NULL), 0);
        assert_int_equal(mounts_at(path), 0);
        snprintf(path, sizeof path, "%s/volume-subpaths", pod);
        assert_int_equal(access(path, F_OK), -1);
}

static void check_type(const char *path, HostPathType t, int want, const char *want_error) {
        char *err = NULL;
        assert_int_equal(host_path_check(path, t, &err), want);
        if (want_error)
                assert_string_equal(err, want_error);
        else
                assert_null(err);
        free(err);
}

static void test_host_path_types(void **state) {
        char dir[300], file[300], sock[300], blk[300], newdir[300], newfile[300], orphan[300], dangling[300],
                msg[600];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        int fd;
        NEED_ROOT();

        snprintf(dir, sizeof dir, "%s/d", base);
        snprintf(file, sizeof file, "%s/f", base);
        snprintf(sock, sizeof sock, "%s/s", base);
        snprintf(blk, sizeof blk, "%s/b", base);
        assert_int_equal(mkdir(dir, 0700), 0);
        write_file(file, "x");
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(strlen(sock) < sizeof sa.sun_path);
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        assert_int_equal(mknod(blk, S_IFBLK | 0600, makedev(7, 250)), 0);

        check_type(dir, HOST_PATH_DIRECTORY, 0, NULL);
        snprintf(msg, sizeof msg, "hostPath type check failed: %s is not a directory", file);
        check_type(file, HOST_PATH_DIRECTORY, -ENOTDIR, msg);
        check_type(file, HOST_PATH_FILE, 0, NULL);
        snprintf(msg, sizeof msg, "hostPath type check failed: %s is not a file", dir);
        check_type(dir, HOST_PATH_FILE, -EEXIST, msg);
        check_type(sock, HOST_PATH_SOCKET, 0, NULL);
        snprintf(msg, sizeof msg, "hostPath type check failed: %s is not a socket file", file);
        check_type(file, HOST_PATH_SOCKET, -EEXIST, msg);
        check_type("/dev/null", HOST_PATH_CHAR_DEVICE, 0, NULL);
        snprintf(msg, sizeof msg, "hostPath type check failed: %s is not a character device", blk);
        check_type(blk, HOST_PATH_CHAR_DEVICE, -EEXIST, msg);
        check_type(blk, HOST_PATH_BLOCK_DEVICE, 0, NULL);
        check_type("/dev/null", HOST_PATH_BLOCK_DEVICE, -EEXIST,
                   "hostPath type check failed: /dev/null is not a block device");
        check_type(file, HOST_PATH_UNSET, 0, NULL);

        /* DirectoryOrCreate: parents made, 0755; existing kept; a file refused. */
        snprintf(newdir, sizeof newdir, "%s/n/e/w", base);
        check_type(newdir, HOST_PATH_DIRECTORY_OR_CREATE, 1, NULL);
        assert_int_equal(stat(newdir, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0755);
        assert_int_equal(st.st_uid, 0);
        check_type(newdir, HOST_PATH_DIRECTORY_OR_CREATE, 0, NULL);
        check_type(dir, HOST_PATH_DIRECTORY_OR_CREATE, 0, NULL);
        assert_int_equal(stat(dir, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0700); /* an existing one is not changed */
        snprintf(msg, sizeof msg, "hostPath type check failed: %s is not a directory", file);
        check_type(file, HOST_PATH_DIRECTORY_OR_CREATE, -ENOTDIR, msg);

        /* FileOrCreate: an empty 0644 file; the parent is not made. */
        snprintf(newfile, sizeof newfile, "%s/new.txt", base);
        check_type(newfile, HOST_PATH_FILE_OR_CREATE, 1, NULL);
        assert_int_equal(stat(newfile, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_size, 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        check_type(file, HOST_PATH_FILE_OR_CREATE, 0, NULL);
        snprintf(msg, sizeof msg, "hostPath type check failed: %s is not a file", dir);
        check_type(dir, HOST_PATH_FILE_OR_CREATE, -EEXIST, msg);
        snprintf(orphan, sizeof orphan, "%s/no-parent/x", base);
        assert_int_equal(host_path_check(orphan, HOST_PATH_FILE_OR_CREATE, NULL), -ENOENT);
        snprintf(orphan, sizeof orphan, "%s/no-parent", base);
        assert_int_equal(access(orphan, F_OK), -1);

        /* A dangling symlink: followed, and the check after creating catches it. */
        snprintf(dangling, sizeof dangling, "%s/dangling", base);
        assert_int_equal(symlink("/nonexistent/kv-host", dangling), 0);
        assert_true(host_path_check(dangling, HOST_PATH_DIRECTORY_OR_CREATE, NULL) < 0);
        close(fd);
}

static void test_tmpfs_mount(void **state) {
        char path[300];
        struct statfs sfs;
        struct stat st;
        int fd;
        NEED_ROOT();

        snprintf(path, sizeof path, "%s/mem", base);
        assert_int_equal(mkdir(path, 0777), 0);
        fd = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(tmpfs_mount(fd, "mem", path, 4 << 20, 0777, NULL, NULL), 1);
        assert_int_equal(statfs(path, &sfs), 0);
        assert_int_equal(sfs.f_type, 0x01021994);
        assert_int_equal((uint64_t) sfs.f_blocks * sfs.f_bsize, 4 << 20);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0777);
        assert_int_equal(mounts_at(path), 1);
        /* Again: already a tmpfs, nothing stacked. */
        assert_int_equal(tmpfs_mount(fd, "mem", path, 4 << 20, 0777, NULL, NULL), 0);
        assert_int_equal(tmpfs_mount(fd, "../mem", path, 0, 0, NULL, NULL), -EINVAL);
        assert_int_equal(mounts_at(path), 1);
        close(fd);
        assert_int_equal(umount2(path, 0), 0);
}

static void test_rootdir_made_shared(void **state) {
        char root[300], sub[320];
        NEED_ROOT();

        snprintf(root, sizeof root, "%s/root-dir", base);
        assert_int_equal(mkdir(root, 0750), 0);
        assert_int_equal(mounts_at(root), 0);
        assert_int_equal(rootdir_make_shared(root), 1);
        assert_int_equal(mounts_at(root), 1);
        assert_true(mount_is_shared(root));
        /* Again: nothing to do, nothing stacked. */
        assert_int_equal(rootdir_make_shared(root), 0);
        assert_int_equal(mounts_at(root), 1);
        /* A directory below a shared mount: nothing to do either (kubelet's isShared). */
        snprintf(sub, sizeof sub, "%s/pods", root);
        assert_int_equal(mkdir(sub, 0750), 0);
        assert_int_equal(rootdir_make_shared(sub), 0);
        assert_int_equal(mounts_at(sub), 0);
        assert_int_equal(umount2(root, 0), 0);

        /* A private mount point already: made shared, not bound again. */
        assert_int_equal(mount(root, root, "none", MS_BIND, NULL), 0);
        assert_int_equal(mount("none", root, "none", MS_PRIVATE, NULL), 0);
        assert_false(mount_is_shared(root));
        assert_int_equal(rootdir_make_shared(root), 1);
        assert_int_equal(mounts_at(root), 1);
        assert_true(mount_is_shared(root));
        assert_int_equal(umount2(root, 0), 0);
        assert_int_equal(rootdir_make_shared("relative"), -EINVAL);
}

#define T(f)                                                                                                \
        cmocka_unit_test_setup_teardown(f, each_setup, each_teardown), {                                    \
                "by_hand_" #f, f, each_setup_by_hand, each_teardown, NULL                                   \
        }

int main(void) {
        const struct CMUnitTest tests[] = {
                T(test_subpath_binds_a_directory),
                T(test_subpath_read_only_keeps_the_volume_flags),
                T(test_subpath_binds_a_file_and_follows_inner_links),
                T(test_subpath_missing_is_created_with_the_volume_mode),
                T(test_subpath_refuses_links_out_of_the_volume),
                T(test_subpath_refuses_dotdot_and_absolute),
                T(test_subpath_binds_the_descriptor_not_the_path),
                T(test_subpath_cleanup),
                T(test_subpath_cleanup_pod),
                T(test_host_path_types),
                T(test_tmpfs_mount),
                T(test_rootdir_made_shared),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
