/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <libudev.h>
#include <linux/loop.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "systemd/validate.h"
#include "volume/host/paths.h"
#include "volume/kinds/csi/blockmap.h"
#include "volume/state/intent.h"
#include "volume/state/voldata.h"

#define BLOCK_DIR "plugins/" CSI_PLUGIN_NAME "/volumeDevices"

#define LOOP_ATTACH_ATTEMPTS 8

/* ---- identity --------------------------------------------------------------------- */

int block_devno_format(dev_t devno, char **ret) {
        return asprintf(ret, "%u:%u", major(devno), minor(devno)) < 0 ? -ENOMEM : 0;
}

int block_devno_parse(const char *s, dev_t *ret) {
        unsigned maj, min;
        int n = 0;

        if (!s || sscanf(s, "%u:%u%n", &maj, &min, &n) != 2 || s[n] != '\0')
                return -EINVAL;
        *ret = makedev(maj, min);
        return 0;
}

void block_identity_done(BlockIdentity *id) {
        free(id->serial);
        free(id->link);
        *id = (BlockIdentity){};
}

int block_identify(RootDir *root, const char *relpath, BlockIdentity *ret) {
        _cleanup_close_ int fd = -1;
        BlockIdentity id = {};
        struct udev *u = NULL;
        struct udev_device *d = NULL;
        struct stat st;
        int r;

        r = root_dir_open_at(root, relpath, O_PATH, 0, &fd);
        if (r < 0)
                return r;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISBLK(st.st_mode))
                return -ENOTBLK;
        id.devno = st.st_rdev;
        /* udev's database may be absent (no udevd, a container): the number is
         * then all there is, and that is still right within this boot. */
        u = udev_new();
        d = u ? udev_device_new_from_devnum(u, 'b', st.st_rdev) : NULL;
        if (d) {
                const char *serial = udev_device_get_property_value(d, "ID_SERIAL");
                struct udev_list_entry *e;
                if (!serial)
                        serial = udev_device_get_property_value(d, "ID_WWN");
                if (serial && !(id.serial = strdup(serial)))
                        r = -ENOMEM;
                udev_list_entry_foreach(e, udev_device_get_devlinks_list_entry(d)) {
                        const char *link = udev_list_entry_get_name(e);
                        if (r >= 0 && !id.link && strncmp(link, "/dev/disk/by-id/", 16) == 0 &&
                            !(id.link = strdup(link)))
                                r = -ENOMEM;
                }
        }
        udev_device_unref(d);
        udev_unref(u);
        if (r < 0) {
                block_identity_done(&id);
                return r;
        }
        *ret = id;
        return 0;
}

/* ---- the device lock -------------------------------------------------------------- */

/* The loop devices whose backing file is abs_path (kubelet scans sysfs too). */
static int loop_find(const char *abs_path, int found[static 8]) {
        DIR *d = opendir("/sys/block");
        struct dirent *de;
        int n = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d)) && n < 8) {
                char path[300], backing[4200];
                FILE *f;
                int nr;
                if (sscanf(de->d_name, "loop%d", &nr) != 1)
                        continue;
                snprintf(path, sizeof path, "/sys/block/%s/loop/backing_file", de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(backing, sizeof backing, f)) {
                        size_t len = strcspn(backing, "\n");
                        backing[len] = '\0';
                        if (len > 10 && streq(backing + len - 10, " (deleted)"))
                                backing[len - 10] = '\0';
                        if (streq(backing, abs_path))
                                found[n++] = nr;
                }
                fclose(f);
        }
        closedir(d);
        return n;
}

static int loop_attach(int backing_fd, int *ret_nr) {
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);

        if (ctl < 0)
                return -errno;
        for (unsigned attempt = 0; attempt < LOOP_ATTACH_ATTEMPTS; attempt++) {
                _cleanup_close_ int loop = -1;
                char dev[32];
                int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (nr < 0)
                        return -errno;
                snprintf(dev, sizeof dev, "/dev/loop%d", nr);
                loop = open(dev, O_RDWR | O_CLOEXEC);
                if (loop < 0)
                        return -errno;
                if (ioctl(loop, LOOP_SET_FD, backing_fd) >= 0) {
                        *ret_nr = nr;
                        return 0;
                }
                if (errno != EBUSY)
                        return -errno;
                /* Someone took that one between GET_FREE and SET_FD: ask again. */
        }
        return -EBUSY;
}

static int loop_detach(int nr) {
        _cleanup_close_ int loop = -1;
        char dev[32];

        snprintf(dev, sizeof dev, "/dev/loop%d", nr);
        loop = open(dev, O_RDONLY | O_CLOEXEC);
        if (loop < 0)
                return errno == ENOENT ? 0 : -errno;
        if (ioctl(loop, LOOP_CLR_FD) < 0 && errno != ENXIO)
                return -errno;
        return 0;
}

/* ---- map and unmap ---------------------------------------------------------------- */

static int map_paths(RootDir *root, const char *spec_name, const char *pod_uid, char **ret_map_dir,
                     char **ret_bind, char **ret_abs_bind) {
        _cleanup_free_ char *map_dir = NULL, *bind = NULL, *abs_bind = NULL;
        int r = path_block_map_dir(spec_name, &map_dir);

        if (r < 0)
                return r;
        if (validate_uid(pod_uid) < 0)
                return -EINVAL;
        if (asprintf(&bind, "%s/%s", map_dir, pod_uid) < 0 || asprintf(&abs_bind, "%s/%s", root->path, bind) < 0)
                return -ENOMEM;
        *ret_map_dir = TAKE_PTR(map_dir);
        *ret_bind = TAKE_PTR(bind);
        if (ret_abs_bind)
                *ret_abs_bind = TAKE_PTR(abs_bind);
        return 0;
}

/* Whether the bind file shows a device: then the bind mount is in place. */
static bool bind_in_place(RootDir *root, const char *bind) {
        _cleanup_close_ int fd = -1;
        struct stat st;
        return root_dir_open_at(root, bind, O_PATH, 0, &fd) >= 0 && fstat(fd, &st) >= 0 && S_ISBLK(st.st_mode);
}

static int bind_device(RootDir *root, const char *publish_path, const char *bind, const LogFields *f) {
        _cleanup_close_ int src = -1, dst = -1;
        char src_proc[64], dst_proc[64];
        int r;

        if (bind_in_place(root, bind))
                return 0;
        r = root_dir_open_at(root, publish_path, O_PATH, 0, &src);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot open %s/%s: %m", root->path, publish_path);
        /* kubelet's mapBindMountDevice: a plain file to mount the device onto. */
        r = root_dir_open_at(root, bind, O_CREAT | O_WRONLY, 0640, &dst);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot create %s/%s: %m", root->path, bind);
        snprintf(src_proc, sizeof src_proc, "/proc/self/fd/%d", src);
        snprintf(dst_proc, sizeof dst_proc, "/proc/self/fd/%d", dst);
        /* The type is ignored for MS_BIND; "none" rather than NULL keeps checkers quiet. */
        if (mount(src_proc, dst_proc, "none", MS_BIND, NULL) < 0)
                return log_fields_errno(LOG_ERR, errno, f, "Cannot bind-mount %s/%s onto %s/%s: %m", root->path,
                                        publish_path, root->path, bind);
        log_fields(LOG_DEBUG, f, "Bind-mounted %s/%s onto %s/%s", root->path, publish_path, root->path, bind);
        return 0;
}

static int link_pod_device(RootDir *root, const char *publish_path, const char *spec_name, const char *pod_uid,
                           const LogFields *f) {
        _cleanup_free_ char *dir = NULL, *target = NULL;
        _cleanup_close_ int dfd = -1;
        int r;

        r = path_pod_device_dir(pod_uid, &dir);
        if (r < 0)
                return r;
        r = root_dir_mkdir_p(root, dir, 0750, &dfd);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot create %s/%s: %m", root->path, dir);
        if (asprintf(&target, "%s/%s", root->path, publish_path) < 0)
                return -ENOMEM;
        /* Replaced, as kubelet does: an old link may point elsewhere. */
        if (unlinkat(dfd, spec_name, 0) < 0 && errno != ENOENT)
                return log_fields_errno(LOG_ERR, errno, f, "Cannot remove %s/%s/%s: %m", root->path, dir,
                                        spec_name);
        if (symlinkat(target, dfd, spec_name) < 0)
                return log_fields_errno(LOG_ERR, errno, f, "Cannot link %s/%s/%s to %s: %m", root->path, dir,
                                        spec_name, target);
        log_fields(LOG_DEBUG, f, "Linked %s/%s/%s to %s", root->path, dir, spec_name, target);
        return 0;
}

static int lock_device(RootDir *root, const char *bind, const char *abs_bind, const LogFields *f) {
        _cleanup_close_ int fd = -1, backing = -1;
        int found[8], nr = -1, r;
        char proc[64];

        r = loop_find(abs_bind, found);
        if (r > 0)
                return 0;
        r = root_dir_open_at(root, bind, O_PATH, 0, &fd);
        if (r < 0)
                return r;
        /* Opened through the verified descriptor: the device itself, read-write. */
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        backing = open(proc, O_RDWR | O_CLOEXEC);
        if (backing < 0)
                return log_fields_errno(LOG_ERR, errno, f, "Cannot open %s: %m", abs_bind);
        r = loop_attach(backing, &nr);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot attach a loop device to %s: %m", abs_bind);
        log_fields(LOG_DEBUG, f, "Locked %s with /dev/loop%d", abs_bind, nr);
        return 0;
}

int block_map(RootDir *root, const char *publish_path, const char *spec_name, const char *pod_uid,
              const LogFields *f) {
        _cleanup_free_ char *map_dir = NULL, *bind = NULL, *abs_bind = NULL;
        int r;

        r = map_paths(root, spec_name, pod_uid, &map_dir, &bind, &abs_bind);
        if (r < 0)
                return r;
        r = root_dir_mkdir_p(root, map_dir, 0750, NULL);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot create %s/%s: %m", root->path, map_dir);
        r = bind_device(root, publish_path, bind, f);
        if (r >= 0)
                r = link_pod_device(root, publish_path, spec_name, pod_uid, f);
        if (r >= 0)
                r = lock_device(root, bind, abs_bind, f);
        return r;
}

int block_unmap(RootDir *root, const char *spec_name, const char *pod_uid, const LogFields *f) {
        _cleanup_free_ char *map_dir = NULL, *bind = NULL, *abs_bind = NULL, *dev_dir = NULL, *link = NULL;
        int found[8], n, r;

        r = map_paths(root, spec_name, pod_uid, &map_dir, &bind, &abs_bind);
        if (r < 0)
                return r;
        n = loop_find(abs_bind, found);
        for (int i = 0; i < n; i++) {
                r = loop_detach(found[i]);
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, f, "Cannot detach /dev/loop%d from %s: %m", found[i],
                                                abs_bind);
                log_fields(LOG_DEBUG, f, "Released the lock /dev/loop%d of %s", found[i], abs_bind);
        }
        r = path_pod_device_dir(pod_uid, &dev_dir);
        if (r < 0)
                return r;
        if (asprintf(&link, "%s/%s", dev_dir, spec_name) < 0)
                return -ENOMEM;
        r = root_dir_unlink(root, link);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s/%s: %m", root->path, link);
        /* The pod's volumeDevices dirs and its pod dir, if nothing else is
         * there, as for file systems (volume_dirs_remove). */
        for (char *slash; root_dir_rmdir(root, dev_dir) >= 0 && (slash = strrchr(dev_dir, '/'));) {
                *slash = '\0';
                if (streq(dev_dir, "pods"))
                        break;
        }
        if (bind_in_place(root, bind) && umount2(abs_bind, UMOUNT_NOFOLLOW) < 0)
                return log_fields_errno(LOG_ERR, errno, f, "Cannot unmount %s: %m", abs_bind);
        r = root_dir_unlink(root, bind);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s: %m", abs_bind);
        (void) root_dir_rmdir(root, map_dir);
        log_fields(LOG_DEBUG, f, "Unmapped %s from pod %s", spec_name, pod_uid);
        return 0;
}

bool block_mapped(RootDir *root, const char *spec_name, const char *pod_uid) {
        _cleanup_free_ char *map_dir = NULL, *bind = NULL, *abs_bind = NULL;
        int found[8];

        if (map_paths(root, spec_name, pod_uid, &map_dir, &bind, &abs_bind) < 0)
                return false;
        return bind_in_place(root, bind) && loop_find(abs_bind, found) > 0;
}

int block_map_refs(RootDir *root, const char *spec_name, const char *except_pod_uid) {
        _cleanup_free_ char *map_dir = NULL;
        struct dirent *de;
        int fd, r, n = 0;
        DIR *d;

        r = path_block_map_dir(spec_name, &map_dir);
        if (r < 0)
                return r;
        r = root_dir_open_dir(root, map_dir, &fd);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        while ((de = readdir(d)))
                if (!streq(de->d_name, ".") && !streq(de->d_name, "..") && !streq_ptr(de->d_name, except_pod_uid))
                        n++;
        closedir(d);
        return n;
}

/* Whether the data dir of spec_name still serves something: the volume's
 * staging (named after the PV that staged it), or another pod's publish. */
static bool block_data_in_use(RootDir *root, const char *spec_name, const char *data) {
        _cleanup_free_ char *staging = NULL, *record = NULL, *records_dir = NULL;
        struct dirent *de;
        bool in_use = false;
        int fd;
        DIR *d;

        if (path_block_staging(spec_name, &staging) < 0 || root_dir_exists(root, staging) != 0 ||
            path_intent_record(data, NULL, &record) < 0 || root_dir_exists(root, record) != 0)
                return true;
        records_dir = strdup(record);
        if (!records_dir)
                return true;
        *strrchr(records_dir, '/') = '\0';
        if (root_dir_open_dir(root, records_dir, &fd) < 0)
                return false;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return true;
        }
        while (!in_use && (de = readdir(d)))
                in_use = strncmp(de->d_name, BLOCK_INTENT_PREFIX, strlen(BLOCK_INTENT_PREFIX)) == 0;
        closedir(d);
        return in_use;
}

/* The dirs of a PV that shares its volume with the PV that staged it, once
 * its last publish went: its data dir, global map dir, publish dir. */
static int block_spec_dirs_remove(RootDir *root, const LogFields *f, const char *spec_name, const char *data) {
        _cleanup_free_ char *file = NULL, *spec_dir = NULL, *dev = NULL, *publish_dir = NULL;
        int r;

        if (asprintf(&file, "%s/" VOL_DATA_FILE, data) < 0 || !(spec_dir = strdup(data)))
                return -ENOMEM;
        *strrchr(spec_dir, '/') = '\0';
        if (asprintf(&dev, "%s/dev", spec_dir) < 0)
                return -ENOMEM;
        r = root_dir_unlink(root, file);
        if (r >= 0)
                r = root_dir_rmdir(root, data);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s/%s: %m", root->path, data);
        (void) root_dir_rmdir(root, dev);
        (void) root_dir_rmdir(root, spec_dir);
        if (path_block_publish(spec_name, "00000000-0000-0000-0000-000000000000", &publish_dir) >= 0) {
                *strrchr(publish_dir, '/') = '\0';
                (void) root_dir_rmdir(root, publish_dir);
        }
        log_fields(LOG_DEBUG, f, "Removed %s/%s, the dirs of PV %s", root->path, spec_dir, spec_name);
        return 0;
}

int block_dirs_remove(RootDir *root, const LogFields *f, const char *spec_name, const char *pod_uid) {
        _cleanup_free_ char *data = NULL, *publish_dir = NULL, *file = NULL, *target = NULL;
        int r;

        r = path_block_data_dir(spec_name, &data);
        if (r < 0)
                return r;
        if (pod_uid) {
                /* A publish: its intent record, and the parent kvolumed made for
                 * the driver's device file.  The file is the driver's: a driver
                 * that leaves it behind keeps the dir, and fails nothing. */
                r = path_block_publish(spec_name, pod_uid, &target);
                if (r < 0)
                        return r;
                if (root_dir_is_mount_point(root, target) > 0)
                        return log_fields_errno(LOG_ERR, EBUSY, f, "%s/%s is still a mount point; not removing it",
                                                root->path, target);
                r = path_intent_record(data, pod_uid, &file);
                if (r < 0)
                        return r;
                r = intent_record_remove(root, file);
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s/%s: %m", root->path, file);
                *strrchr(target, '/') = '\0';
                (void) root_dir_rmdir(root, target);
                log_fields(LOG_DEBUG, f, "Removed the records of the publish of %s for pod %s", spec_name, pod_uid);
                /* Two PVs may name one volume: the dirs of one that did not
                 * stage it go with its last publish. */
                if (!block_data_in_use(root, spec_name, data))
                        return block_spec_dirs_remove(root, f, spec_name, data);
                return 0;
        }
        /* The staged volume: the staging dir, the data dir with vol_data.json
         * and our record, the global map dir (empty by now), the volume's dir. */
        r = path_block_staging(spec_name, &target);
        if (r < 0)
                return r;
        if (root_dir_is_mount_point(root, target) > 0)
                return log_fields_errno(LOG_ERR, EBUSY, f, "%s/%s is still a mount point; not removing it",
                                        root->path, target);
        r = root_dir_rmdir(root, target);
        if (r < 0 && r != -ENOTDIR)
                return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s/%s: %m", root->path, target);
        for (size_t i = 0; i < 2; i++) {
                free(file);
                file = NULL;
                r = i == 0 ? (asprintf(&file, "%s/" VOL_DATA_FILE, data) < 0 ? -ENOMEM : 0)
                           : path_intent_record(data, NULL, &file);
                if (r < 0)
                        return r;
                r = i == 0 ? root_dir_unlink(root, file) : intent_record_remove(root, file);
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s/%s: %m", root->path, file);
        }
        r = root_dir_rmdir(root, data);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Cannot remove %s/%s: %m", root->path, data);
        *strrchr(data, '/') = '\0'; /* volumeDevices/<spec> */
        free(file);
        if (asprintf(&file, "%s/dev", data) < 0)
                return -ENOMEM;
        (void) root_dir_rmdir(root, file);
        (void) root_dir_rmdir(root, data);
        r = path_block_publish(spec_name, "00000000-0000-0000-0000-000000000000", &publish_dir);
        if (r >= 0) {
                *strrchr(publish_dir, '/') = '\0';
                (void) root_dir_rmdir(root, publish_dir);
        }
        /* The parents mkdir -p made, if nothing else lives there any more. */
        static const char *const parents[] = { "plugins/" CSI_PLUGIN_NAME "/volumeDevices/staging",
                                               "plugins/" CSI_PLUGIN_NAME "/volumeDevices/publish",
                                               "plugins/" CSI_PLUGIN_NAME "/volumeDevices" };
        for (size_t i = 0; i < ELEMENTSOF(parents); i++)
                (void) root_dir_rmdir(root, parents[i]);
        log_fields(LOG_DEBUG, f, "Removed the staging dirs of block volume %s", spec_name);
        return 0;
}
