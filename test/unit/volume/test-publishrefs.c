/* SPDX-License-Identifier: Apache-2.0 */
/* The publishes of a volume found on disk (volume/kinds/csi/publishrefs.c): what in
 * kubelet's layout counts as one, and what does not.  The mount cases run
 * in a private mount namespace of their own (root needed; skipped otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "test/unit/tmptree.h"
#include "volume/internal.h"

#define DRV "hostpath.csi.k8s.io"
#define UID1 "0b5e9c1e-1111-4222-8333-444455556666"
#define UID2 "0b5e9c1e-2222-4333-8444-555566667777"
#define VD "plugins/kubernetes.io/csi/volumeDevices"

static char base[] = "/tmp/kvolumed-publishrefs-XXXXXX";
static VolumeManager m;

static int setup(void **state) {
        assert_non_null(mkdtemp(base));
        assert_int_equal(root_dir_open(base, &m.root), 0);
        assert_int_equal(mount_table_new(NULL, base, MOUNT_SOURCE_AUTO, NULL, NULL, &m.mounts), 0);
        return 0;
}

static int teardown(void **state) {
        publish_refs_free(&m);
        mount_table_free(m.mounts);
        root_dir_free(m.root);
        return tmptree_remove(base) == 0 ? 0 : -1;
}

static void put(const char *rel, const char *text) {
        _cleanup_free_ char *dir = strdup(rel);
        *strrchr(dir, '/') = '\0';
        assert_true(root_dir_mkdir_p(m.root, dir, 0750, NULL) >= 0);
        assert_int_equal(root_dir_write_file(m.root, rel, text, strlen(text), 0640, false), 0);
}

static void vol_data(const char *dir, const char *driver, const char *handle) {
        char rel[512], text[512];
        snprintf(rel, sizeof rel, "%s/vol_data.json", dir);
        snprintf(text, sizeof text, "{\"driverName\":\"%s\",\"specVolID\":\"pv\",\"volumeHandle\":\"%s\"}\n", driver,
                 handle);
        put(rel, text);
}

static int find(const char *driver, const char *handle, char **first) {
        assert_int_equal(mount_table_refresh(m.mounts), 0);
        return publish_refs_find(&m, driver, handle, first);
}

static void test_pod_volume_records(void **state) {
        char *first = NULL;

        assert_int_equal(find(DRV, "h1", NULL), 0); /* nothing at all */
        vol_data("pods/" UID1 "/volumes/kubernetes.io~csi/pv-a", DRV, "h1");
        assert_int_equal(find(DRV, "h1", &first), 1);
        assert_string_equal(first, "pods/" UID1 "/volumes/kubernetes.io~csi/pv-a/vol_data.json");
        free(first);
        assert_int_equal(find(DRV, "h2", NULL), 0);
        assert_int_equal(find("other.csi.k8s.io", "h1", NULL), 0);
        /* Two PVs of one handle: two publishes. */
        vol_data("pods/" UID2 "/volumes/kubernetes.io~csi/pv-b", DRV, "h1");
        assert_int_equal(find(DRV, "h1", NULL), 2);
        /* A record nobody can read names nothing. */
        put("pods/" UID2 "/volumes/kubernetes.io~csi/pv-b/vol_data.json", "{not json");
        assert_int_equal(find(DRV, "h1", NULL), 1);
        assert_int_equal(root_dir_unlink(m.root, "pods/" UID1 "/volumes/kubernetes.io~csi/pv-a/vol_data.json"), 0);
        assert_int_equal(root_dir_unlink(m.root, "pods/" UID2 "/volumes/kubernetes.io~csi/pv-b/vol_data.json"), 0);
        assert_int_equal(find(DRV, "h1", NULL), 0);
}

static void test_block_mappings(void **state) {
        char *first = NULL;

        /* The volume's own data dir is no publish, nor a file the driver left. */
        vol_data(VD "/pv-blk/data", DRV, "hb");
        put(VD "/publish/pv-blk/" UID1, "");
        assert_int_equal(find(DRV, "hb", NULL), 0);
        /* A bind file, under another PV of the same handle too. */
        vol_data(VD "/pv-twin/data", DRV, "hb");
        put(VD "/pv-twin/dev/" UID2, "");
        assert_int_equal(find(DRV, "hb", &first), 1);
        assert_string_equal(first, VD "/pv-twin/dev/" UID2);
        free(first);
        assert_int_equal(find(DRV, "other", NULL), 0);
        assert_int_equal(root_dir_unlink(m.root, VD "/pv-twin/dev/" UID2), 0);
        /* A pod's device link. */
        assert_int_equal(root_dir_mkdir_p(m.root, "pods/" UID1 "/volumeDevices/kubernetes.io~csi", 0750, NULL) >= 0, 1);
        {
                char link[512];
                snprintf(link, sizeof link, "%s/pods/" UID1 "/volumeDevices/kubernetes.io~csi/pv-blk", base);
                assert_int_equal(symlink("/dev/null", link), 0);
                assert_int_equal(find(DRV, "hb", NULL), 1);
                assert_int_equal(unlink(link), 0);
        }
        assert_int_equal(find(DRV, "hb", NULL), 0);
}

static void test_mount_points(void **state) {
        char file[512], dir[512];

        if (geteuid() != 0)
                skip();
        assert_int_equal(unshare(CLONE_NEWNS), 0);
        assert_int_equal(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        /* The table of the namespace we are in now: the kernel's events
         * are those of the namespace it was made in. */
        mount_table_free(m.mounts);
        assert_int_equal(mount_table_new(NULL, base, MOUNT_SOURCE_AUTO, NULL, NULL, &m.mounts), 0);
        /* A publish file the driver mounted is a publish. */
        vol_data(VD "/pv-m/data", DRV, "hm");
        put(VD "/publish/pv-m/" UID1, "");
        snprintf(file, sizeof file, "%s/" VD "/publish/pv-m/" UID1, base);
        assert_int_equal(find(DRV, "hm", NULL), 0);
        assert_int_equal(mount("/dev/null", file, NULL, MS_BIND, NULL), 0);
        assert_int_equal(find(DRV, "hm", NULL), 1);
        assert_int_equal(umount2(file, 0), 0);
        /* A mount point is never looked into, even where a record would be. */
        assert_int_equal(root_dir_mkdir_p(m.root, "pods/" UID2 "/volumes/kubernetes.io~csi/pv-x", 0750, NULL) >= 0, 1);
        snprintf(dir, sizeof dir, "%s/pods/" UID2 "/volumes/kubernetes.io~csi/pv-x", base);
        assert_int_equal(mount("tmpfs", dir, "tmpfs", 0, "size=1m"), 0);
        vol_data("pods/" UID2 "/volumes/kubernetes.io~csi/pv-x", DRV, "hx");
        assert_int_equal(find(DRV, "hx", NULL), 0);
        assert_int_equal(umount2(dir, 0), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_pod_volume_records),
                                            cmocka_unit_test(test_block_mappings),
                                            cmocka_unit_test(test_mount_points) };
        return cmocka_run_group_tests(tests, setup, teardown);
}
