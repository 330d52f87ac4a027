/* SPDX-License-Identifier: Apache-2.0 */
/* The publishes of a volume that exist on disk, whatever the in-memory state
 * says: the guard before NodeUnstageVolume.  The mount table check
 * (operations.c) sees only mounts of the file system at globalmount; when
 * globalmount is no mount point (a raw block volume, a driver whose stage
 * mounts nothing, a staging mount lost behind our back while bind mounts of
 * its file system live on) it sees nothing, and a state lost in a crash or
 * a publish made behind our back would be unstaged from under a pod.
 *
 * What kubelet's layout holds is what counts (kubelet-facts §1):
 *   - pods/<uid>/volumes/kubernetes.io~csi/<spec>/vol_data.json naming the
 *     same driver and handle: a publish, mounted or not yet removed (it goes
 *     only after its target, kubelet's removeMountDir and ours);
 *   - for a raw block volume, under volumeDevices/<spec> of every spec whose
 *     data/vol_data.json names the driver and handle (two PVs may share a
 *     handle): a bind file in <spec>/dev/, a publish file under publish/<spec>/
 *     that is a mount point, a pod's device link in
 *     pods/<uid>/volumeDevices/kubernetes.io~csi/<spec>.
 * Only root-dir's own directories and files are read, never anything inside
 * a mount point (the mount table says which paths are): a dead file system
 * mounted at a publish target cannot stall the loop here. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/internal.h"
#include "volume/paths.h"
#include "volume/voldata.h"

#define VOL_DATA_MAX (64 * 1024)
#define BLOCK_DIR "plugins/" CSI_PLUGIN_NAME "/volumeDevices"

typedef struct Search {
        VolumeManager *m;
        const char *driver;
        const char *handle;
        unsigned found;
        char *first; /* relative to root-dir */
} Search;

static bool is_mount_point(Search *s, const char *rel) {
        _cleanup_free_ char *abs = NULL;
        return asprintf(&abs, "%s/%s", s->m->root->path, rel) >= 0 && mount_table_is_mounted(s->m->mounts, abs);
}

static void found(Search *s, const char *rel) {
        LogFields f = { .driver = s->driver, .volume_handle = s->handle };
        log_fields(LOG_DEBUG, &f, "Publish of %s^%s found on disk: %s/%s", s->driver, s->handle, s->m->root->path,
                   rel);
        if (s->found++ == 0)
                s->first = strdup(rel);
}

/* Whether dir/vol_data.json names the driver and handle: 1, 0, -errno.  A
 * missing or malformed file names nothing. */
static int names_volume(Search *s, const char *dir) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        VolData d = {};
        int r;

        if (asprintf(&path, "%s/" VOL_DATA_FILE, dir) < 0)
                return -ENOMEM;
        r = root_dir_read_file(s->m->root, path, VOL_DATA_MAX, &text, NULL);
        if (r == -ENOENT || r == -ENOTDIR)
                return 0;
        if (r < 0)
                return r;
        if (vol_data_parse(text, &d) < 0)
                return 0;
        r = streq_ptr(d.driver_name, s->driver) && streq_ptr(d.volume_handle, s->handle);
        vol_data_done(&d);
        return r;
}

typedef int (*entry_t)(Search *s, const char *dir, const char *name);

/* Calls "each" for every entry of dir (relative); a missing dir has none. */
static int for_each_entry(Search *s, const char *dir, entry_t each) {
        struct dirent *de;
        DIR *d;
        int fd, r = 0;

        /* A mount point is not root-dir's own directory: not looked into. */
        if (is_mount_point(s, dir))
                return 0;
        r = root_dir_open_dir(s->m->root, dir, &fd);
        if (r == -ENOENT || r == -ENOTDIR)
                return 0;
        if (r < 0)
                return r;
        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                close(fd);
                return r;
        }
        while (r >= 0 && (errno = 0, de = readdir(d)))
                if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
                        r = each(s, dir, de->d_name);
        if (r >= 0 && errno != 0)
                r = -errno;
        closedir(d);
        return r;
}

static int pod_volume(Search *s, const char *dir, const char *spec) {
        _cleanup_free_ char *vdir = NULL;
        int r;

        if (asprintf(&vdir, "%s/%s", dir, spec) < 0)
                return -ENOMEM;
        if (is_mount_point(s, vdir))
                return 0;
        r = names_volume(s, vdir);
        if (r > 0) {
                _cleanup_free_ char *rel = NULL;
                if (asprintf(&rel, "%s/" VOL_DATA_FILE, vdir) < 0)
                        return -ENOMEM;
                found(s, rel);
        }
        return r < 0 ? r : 0;
}

/* A pod's device link named <spec>, for a block volume of the handle. */
static int pod_device(Search *s, const char *dir, const char *spec) {
        _cleanup_free_ char *data = NULL, *rel = NULL;
        int r;

        if (path_block_data_dir(spec, &data) < 0)
                return 0; /* no name we would have made */
        r = names_volume(s, data);
        if (r > 0 && asprintf(&rel, "%s/%s", dir, spec) >= 0)
                found(s, rel);
        return r < 0 ? r : 0;
}

static int pod(Search *s, const char *dir, const char *uid) {
        _cleanup_free_ char *volumes = NULL, *devices = NULL;
        int r;

        if (asprintf(&volumes, "%s/%s/volumes/" CSI_PLUGIN_NAME_ESCAPED, dir, uid) < 0 ||
            asprintf(&devices, "%s/%s/volumeDevices/" CSI_PLUGIN_NAME_ESCAPED, dir, uid) < 0)
                return -ENOMEM;
        r = for_each_entry(s, volumes, pod_volume);
        if (r >= 0)
                r = for_each_entry(s, devices, pod_device);
        return r;
}

static int bind_file(Search *s, const char *dir, const char *name) {
        _cleanup_free_ char *rel = NULL;
        if (asprintf(&rel, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        found(s, rel);
        return 0;
}

static int publish_file(Search *s, const char *dir, const char *name) {
        _cleanup_free_ char *rel = NULL;
        if (asprintf(&rel, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        /* A file the driver left behind after its unpublish is no publish. */
        if (is_mount_point(s, rel))
                found(s, rel);
        return 0;
}

static int block_volume(Search *s, const char *dir, const char *spec) {
        _cleanup_free_ char *data = NULL, *map = NULL, *publish = NULL;
        int r;

        if (streq(spec, "staging") || streq(spec, "publish") || path_block_data_dir(spec, &data) < 0 ||
            path_block_map_dir(spec, &map) < 0 || asprintf(&publish, "%s/publish/%s", dir, spec) < 0)
                return 0;
        r = names_volume(s, data);
        if (r <= 0)
                return r;
        r = for_each_entry(s, map, bind_file);
        if (r >= 0)
                r = for_each_entry(s, publish, publish_file);
        return r;
}

int publish_refs_find(VolumeManager *m, const char *driver, const char *handle, char **ret_first) {
        Search s = { .m = m, .driver = driver, .handle = handle };
        int r;

        r = for_each_entry(&s, "pods", pod);
        if (r >= 0)
                r = for_each_entry(&s, BLOCK_DIR, block_volume);
        if (r < 0) {
                free(s.first);
                return r;
        }
        if (ret_first)
                *ret_first = s.first;
        else
                free(s.first);
        return (int) MIN(s.found, (unsigned) INT32_MAX);
}
