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
#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/state/voldata.h"

#define VOL_DATA_MAX (64 * 1024)
#define BLOCK_DIR "plugins/" CSI_PLUGIN_NAME "/volumeDevices"

/* One scan finds the publishes of every volume: a reconcile pass may start
 * hundreds of unstages (all in one loop iteration, their guards included),
 * and a scan per unstage would read every pod's records for each.  The
 * index is kept for the loop iteration it was made in: nothing of ours
 * creates a publish meanwhile (an unstage excludes the volume's other
 * operations, and other volumes' publishes do not count), and what goes
 * meanwhile only makes it hold a little longer. */
typedef struct Refs {
        unsigned n;
        char *first; /* relative to root-dir */
} Refs;

struct PublishRefs {
        uint64_t iteration;
        Hashmap *by_volume; /* "<driver>\n<handle>" → Refs */
};

typedef struct Search {
        VolumeManager *m;
        Hashmap *by_volume;
        Hashmap *block_specs; /* block spec dir name → its volume's key (data/vol_data.json) */
} Search;

static bool is_mount_point(Search *s, const char *rel) {
        _cleanup_free_ char *abs = NULL;
        /* Confirmed by the kernel where the table says no (a renamed parent). */
        return asprintf(&abs, "%s/%s", s->m->root->path, rel) < 0 || mount_table_mounted(s->m->mounts, abs) != 0;
}

static int add(Search *s, const char *key, const char *rel) {
        Refs *refs = hashmap_get(s->by_volume, key);

        if (!refs) {
                refs = calloc(1, sizeof *refs);
                if (!refs || !(refs->first = strdup(rel)) || hashmap_put(s->by_volume, key, refs, NULL) < 0) {
                        if (refs)
                                free(refs->first);
                        free(refs);
                        return -ENOMEM;
                }
        }
        refs->n++;
        return 0;
}

/* The key of the volume dir/vol_data.json names: 1 with *ret, 0 when a
 * missing or malformed file names none, -errno. */
static int volume_key(Search *s, const char *dir, char **ret) {
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
        if (vol_data_parse(text, &d) < 0 || !d.driver_name || !d.volume_handle) {
                vol_data_done(&d);
                return 0;
        }
        r = asprintf(ret, "%s\n%s", d.driver_name, d.volume_handle) < 0 ? -ENOMEM : 1;
        vol_data_done(&d);
        return r;
}

typedef int (*entry_t)(Search *s, const char *dir, const char *name, const char *key);

/* Calls "each" for every entry of dir (relative); a missing dir has none. */
static int for_each_entry(Search *s, const char *dir, entry_t each, const char *key) {
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
                        r = each(s, dir, de->d_name, key);
        if (r >= 0 && errno != 0)
                r = -errno;
        closedir(d);
        return r;
}

static int pod_volume(Search *s, const char *dir, const char *spec, const char *unused) {
        _cleanup_free_ char *vdir = NULL, *key = NULL, *rel = NULL;
        int r;

        if (asprintf(&vdir, "%s/%s", dir, spec) < 0)
                return -ENOMEM;
        if (is_mount_point(s, vdir))
                return 0;
        r = volume_key(s, vdir, &key);
        if (r <= 0)
                return r;
        if (asprintf(&rel, "%s/" VOL_DATA_FILE, vdir) < 0)
                return -ENOMEM;
        return add(s, key, rel);
}

/* A pod's device link named <spec>: a mapping of that spec's block volume. */
static int pod_device(Search *s, const char *dir, const char *spec, const char *unused) {
        _cleanup_free_ char *rel = NULL;
        const char *key = hashmap_get(s->block_specs, spec);

        if (!key)
                return 0;
        if (asprintf(&rel, "%s/%s", dir, spec) < 0)
                return -ENOMEM;
        return add(s, key, rel);
}

static int pod(Search *s, const char *dir, const char *uid, const char *unused) {
        _cleanup_free_ char *volumes = NULL, *devices = NULL;
        int r;

        if (asprintf(&volumes, "%s/%s/volumes/" CSI_PLUGIN_NAME_ESCAPED, dir, uid) < 0 ||
            asprintf(&devices, "%s/%s/volumeDevices/" CSI_PLUGIN_NAME_ESCAPED, dir, uid) < 0)
                return -ENOMEM;
        r = for_each_entry(s, volumes, pod_volume, NULL);
        if (r >= 0)
                r = for_each_entry(s, devices, pod_device, NULL);
        return r;
}

static int bind_file(Search *s, const char *dir, const char *name, const char *key) {
        _cleanup_free_ char *rel = NULL;
        if (asprintf(&rel, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        return add(s, key, rel);
}

static int publish_file(Search *s, const char *dir, const char *name, const char *key) {
        _cleanup_free_ char *rel = NULL;
        if (asprintf(&rel, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        /* A file the driver left behind after its unpublish is no publish. */
        return is_mount_point(s, rel) ? add(s, key, rel) : 0;
}

static int block_volume(Search *s, const char *dir, const char *spec, const char *unused) {
        _cleanup_free_ char *data = NULL, *map = NULL, *publish = NULL, *key = NULL;
        int r;

        if (streq(spec, "staging") || streq(spec, "publish") || path_block_data_dir(spec, &data) < 0 ||
            path_block_map_dir(spec, &map) < 0 || asprintf(&publish, "%s/publish/%s", dir, spec) < 0)
                return 0;
        r = volume_key(s, data, &key);
        if (r <= 0)
                return r;
        /* The data dir is the volume's own (written at stage): no publish. */
        r = hashmap_put(s->block_specs, spec, key, NULL);
        if (r < 0)
                return r;
        r = for_each_entry(s, map, bind_file, key);
        if (r >= 0)
                r = for_each_entry(s, publish, publish_file, key);
        TAKE_PTR(key); /* owned by block_specs */
        return r;
}

static Hashmap *by_volume_free(Hashmap *h) {
        void *value;
        for (size_t i = 0; hashmap_iterate(h, &i, NULL, &value);) {
                free(((Refs *) value)->first);
                free(value);
        }
        return hashmap_free(h);
}

static int scan(VolumeManager *m, Hashmap **ret) {
        Search s = { .m = m, .by_volume = hashmap_new(), .block_specs = hashmap_new() };
        void *value;
        int r = -ENOMEM;

        if (s.by_volume && s.block_specs) {
                r = for_each_entry(&s, BLOCK_DIR, block_volume, NULL);
                if (r >= 0)
                        r = for_each_entry(&s, "pods", pod, NULL);
        }
        for (size_t i = 0; hashmap_iterate(s.block_specs, &i, NULL, &value);)
                free(value);
        hashmap_free(s.block_specs);
        if (r < 0) {
                by_volume_free(s.by_volume);
                return r;
        }
        *ret = s.by_volume;
        return 0;
}

int publish_refs_find(VolumeManager *m, const char *driver, const char *handle, char **ret_first) {
        _cleanup_free_ char *key = NULL;
        LogFields f = { .driver = driver, .volume_handle = handle };
        uint64_t iteration = 0;
        Refs *refs;
        int r;

        if (!m->publish_refs && !(m->publish_refs = calloc(1, sizeof *m->publish_refs)))
                return -ENOMEM;
        /* Without a loop (the tests), every call looks again. */
        if (!m->event || sd_event_get_iteration(m->event, &iteration) < 0 || !m->publish_refs->by_volume ||
            m->publish_refs->iteration != iteration) {
                m->publish_refs->by_volume = by_volume_free(m->publish_refs->by_volume);
                r = scan(m, &m->publish_refs->by_volume);
                if (r < 0)
                        return r;
                m->publish_refs->iteration = iteration;
        }
        if (asprintf(&key, "%s\n%s", driver, handle) < 0)
                return -ENOMEM;
        refs = hashmap_get(m->publish_refs->by_volume, key);
        if (!refs)
                return 0;
        log_fields(LOG_DEBUG, &f, "%u publish(es) of %s^%s found on disk, the first %s/%s", refs->n, driver, handle,
                   m->root->path, refs->first);
        if (ret_first && !(*ret_first = strdup(refs->first)))
                return -ENOMEM;
        return (int) MIN(refs->n, (unsigned) INT32_MAX);
}

void publish_refs_free(VolumeManager *m) {
        if (!m->publish_refs)
                return;
        by_volume_free(m->publish_refs->by_volume);
        free(m->publish_refs);
        m->publish_refs = NULL;
}
