/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/host/beneath.h"
#include "volume/host/subpath.h"

#define SUBPATHS_DIR "volume-subpaths"

/* The per-mount flags a read-only remount keeps (ST_* and MS_* agree). */
#define KEPT_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME)

/* How many binds stacked on one index we unmount before giving up: a crash
 * loop of an old version could stack a few, never this many. */
#define UNMOUNT_MAX 16

static inline void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

static int set_error(char **ret_error, const char *fmt, ...) _printf_(2, 3);
static int set_error(char **ret_error, const char *fmt, ...) {
        va_list ap;
        /* Written once, on the failure: the caller's pointer is not freed. */
        if (!ret_error)
                return 0;
        va_start(ap, fmt);
        if (vasprintf(ret_error, fmt, ap) < 0)
                *ret_error = NULL;
        va_end(ap);
        return 0;
}

/* follow_symlinks: RESOLVE_OURS or RESOLVE_VOLUME below. */
static int openat2_fd(int dirfd, const char *path, int flags, bool follow_symlinks) {
        return open_beneath(dirfd, path, flags, 0, follow_symlinks);
}

/* Below the pod directory nothing is followed: kvolumed made every entry. */
#define RESOLVE_OURS false
/* Inside the volume the pod's own symlinks are followed while they stay in. */
#define RESOLVE_VOLUME true

static int fd_statx(int fd, struct statx *sx) {
        /* Cached attributes: a file system that stopped answering must not
         * hang the question "is this a mount". */
        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC,
                  STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE | STATX_MNT_ID, sx) < 0)
                return -errno;
        return 0;
}

static bool statx_mount_root(const struct statx *sx) {
        return (sx->stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
               (sx->stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

static dev_t statx_dev(const struct statx *sx) {
        return makedev(sx->stx_dev_major, sx->stx_dev_minor);
}

#if KVOLUMED_TEST_HOOKS
void (*subpath_test_after_resolve)(int fd, void *userdata) = NULL;
void *subpath_test_after_resolve_userdata = NULL;
#endif

/* ---- subPathExpr ---- */

static const char *env_lookup(const char *const *env, size_t n_env, const char *name, size_t len) {
        const char *found = NULL;
        for (size_t i = 0; i < n_env; i++)
                if (env[i] && strncmp(env[i], name, len) == 0 && env[i][len] == '=')
                        found = env[i] + len + 1; /* the last one wins, as in kubelet's map */
        return found;
}

static int strcmp_ptr(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

int subpath_expand(const char *expr, const char *const *env, size_t n_env, char **ret, char **ret_error) {
        _cleanup_free_ char *out = NULL;
        size_t size = 0;
        _cleanup_(fclosep) FILE *f = NULL;
        char **missing = NULL;
        size_t n_missing = 0;
        int r = 0;

        if (!expr || !ret)
                return -EINVAL;
        f = open_memstream(&out, &size);
        if (!f)
                return -ENOMEM;
        for (const char *p = expr; *p; p++) {
                const char *close_paren;
                if (p[0] != '$' || p[1] == '\0') {
                        fputc(*p, f);
                        continue;
                }
                if (p[1] == '$') { /* "$$" is an escaped "$" */
                        fputc('$', f);
                        p++;
                        continue;
                }
                if (p[1] != '(' || !(close_paren = strchr(p + 2, ')'))) {
                        /* Not a reference: kept as written, and scanning goes on
                         * after the "$" (so "$($(A)" still expands $(A)). */
                        fputc('$', f);
                        continue;
                }
                size_t len = close_paren - (p + 2);
                const char *v = env_lookup(env, n_env, p + 2, len);
                if (isempty(v)) {
                        char *name = strndup(p + 2, len), **grown;
                        bool dup = false;
                        if (!name) {
                                r = -ENOMEM;
                                goto finish;
                        }
                        for (size_t i = 0; i < n_missing; i++)
                                dup = dup || streq(missing[i], name);
                        if (dup) {
                                free(name);
                        } else {
                                grown = realloc(missing, (n_missing + 1) * sizeof *missing);
                                if (!grown) {
                                        free(name);
                                        r = -ENOMEM;
                                        goto finish;
                                }
                                missing = grown;
                                missing[n_missing++] = name;
                        }
                } else
                        fputs(v, f);
                p = close_paren;
        }
        if (fflush(f) != 0 || ferror(f)) {
                r = -ENOMEM;
                goto finish;
        }
        if (n_missing > 0) {
                _cleanup_free_ char *list = NULL;
                size_t list_size = 0;
                FILE *l = open_memstream(&list, &list_size);
                if (!l) {
                        r = -ENOMEM;
                        goto finish;
                }
                qsort(missing, n_missing, sizeof *missing, strcmp_ptr);
                for (size_t i = 0; i < n_missing; i++)
                        fprintf(l, "%s%s", i > 0 ? ", " : "", missing[i]);
                fclose(l);
                set_error(ret_error, "missing value for %s", strempty(list));
                r = -EINVAL;
                goto finish;
        }
        fclose(TAKE_PTR(f));
        *ret = TAKE_PTR(out);
finish:
        for (size_t i = 0; i < n_missing; i++)
                free(missing[i]);
        free(missing);
        return r;
}

/* ---- validation ---- */

int subpath_validate(const char *subpath, char **ret_error) {
        if (isempty(subpath))
                return set_error(ret_error, "empty SubPath"), -EINVAL;
        if (subpath[0] == '/')
                return set_error(ret_error, "error SubPath `%s` must not be an absolute path", subpath),
                       -EINVAL;
        for (const char *p = subpath; *p;) {
                size_t n = strcspn(p, "/");
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return set_error(ret_error,
                                         "unable to provision SubPath `%s`: must not contain '..'", subpath),
                               -EINVAL;
                p += n;
                if (*p == '/')
                        p++;
        }
        if (strlen(subpath) >= PATH_MAX)
                return set_error(ret_error, "SubPath is longer than %d bytes", PATH_MAX - 1), -EINVAL;
        for (const char *p = subpath; *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        return set_error(ret_error, "SubPath contains a control character"), -EINVAL;
        return 0;
}

/* ---- resolution inside the volume ---- */

/* After openat2 refused the subPath with EXDEV or ELOOP: the first prefix of
 * it that cannot be followed, for the operator's message.  The walk only
 * opens (O_PATH), so it changes nothing. */
static char *find_escaping_link(int volume_fd, const char *subpath) {
        _cleanup_free_ char *copy = strdup(subpath);
        if (!copy)
                return NULL;
        for (char *p = copy;;) {
                char *slash = strchr(p, '/');
                if (slash)
                        *slash = '\0';
                if (*copy) {
                        _cleanup_close_ int fd = openat2_fd(volume_fd, copy, O_PATH, RESOLVE_VOLUME);
                        if (fd == -EXDEV || fd == -ELOOP)
                                return strdup(copy);
                        if (fd < 0)
                                return NULL;
                }
                if (!slash)
                        return NULL;
                *slash = '/';
                p = slash + 1;
        }
}

static int refuse_escape(const SubpathRequest *req, int error, char **ret_error) {
        _cleanup_free_ char *link = find_escaping_link(req->volume_fd, req->subpath);
        _cleanup_free_ char *msg = NULL;
        int k;

        /* ELOOP: a loop of symlinks, or a /proc magic link (never followed). */
        if (error == -ELOOP)
                k = asprintf(&msg,
                             "subPath '%s' of volume '%s' cannot be resolved (a symlink loop or a magic "
                             "link%s%s%s)",
                             req->subpath, req->volume_name, link ? " at '" : "", strempty(link),
                             link ? "'" : "");
        else
                k = asprintf(&msg, "subPath '%s' of volume '%s' resolves outside the volume%s%s%s",
                             req->subpath, req->volume_name, link ? " (through symlink '" : "",
                             strempty(link), link ? "')" : "");
        if (k < 0)
                return -ENOMEM;
        set_error(ret_error, "%s", msg);
        return log_fields_errno(
                LOG_ERR, error == -ELOOP ? -ELOOP : -EXDEV, req->log,
                "%s; refused (the volume is %s): fix the volume's content or the pod's subPath", msg,
                strempty(req->volume_path));
}

/* kubelet's SafeMakeDir: each missing component made with the volume
 * root's mode, fchmod'ed past the umask, the next one made in the
 * descriptor just opened with O_NOFOLLOW so that nothing can be swapped
 * under us.  Every prefix is resolved again from the volume's root, beneath
 * it, so an existing symlink on the way is checked like any other. */
static int open_or_create(const SubpathRequest *req, mode_t mode, int *ret_fd, char **ret_error) {
        _cleanup_free_ char *copy = strdup(req->subpath);
        _cleanup_close_ int parent = -1;
        int r;

        if (!copy)
                return -ENOMEM;
        for (char *p = copy;;) {
                char *slash = strchr(p, '/');
                _cleanup_close_ int fd = -1;
                if (slash)
                        *slash = '\0';
                if (*p == '\0' || streq(p, ".")) { /* "a//b", "./a": nothing to make */
                        if (!slash)
                                break;
                        *slash = '/';
                        p = slash + 1;
                        continue;
                }
                fd = openat2_fd(req->volume_fd, copy, O_PATH, RESOLVE_VOLUME);
                if (fd == -ENOENT) {
                        int pfd = parent >= 0 ? parent : req->volume_fd;
                        if (mkdirat(pfd, p, mode) < 0 && errno != EEXIST)
                                return r = -errno,
                                       set_error(ret_error, "cannot create directory '%s' in volume '%s'",
                                                 copy, req->volume_name),
                                       log_fields_errno(LOG_ERR, r, req->log,
                                                        "Cannot create subPath directory %s/%s: %m",
                                                        strempty(req->volume_path), copy);
                        _cleanup_close_ int made =
                                openat(pfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (made < 0)
                                return r = -errno,
                                       set_error(ret_error, "cannot open '%s' in volume '%s'", copy,
                                                 req->volume_name),
                                       log_fields_errno(LOG_ERR, r, req->log, "Cannot open %s/%s: %m",
                                                        strempty(req->volume_path), copy);
                        if (fchmod(made, mode) < 0)
                                return log_fields_errno(LOG_ERR, errno, req->log, "Cannot chmod %s/%s: %m",
                                                        strempty(req->volume_path), copy);
                        log_fields(LOG_INFO, req->log, "Created subPath directory %s/%s (mode %04o)",
                                   strempty(req->volume_path), copy, (unsigned) mode);
                        fd = openat2_fd(req->volume_fd, copy, O_PATH, RESOLVE_VOLUME);
                }
                if (fd == -EXDEV || fd == -ELOOP)
                        return refuse_escape(req, fd, ret_error);
                if (fd < 0) {
                        r = fd;
                        set_error(ret_error, "cannot open subPath '%s' of volume '%s': %s", req->subpath,
                                  req->volume_name, strerror(-r));
                        return log_fields_errno(LOG_ERR, r, req->log, "Cannot open subPath %s/%s: %m",
                                                strempty(req->volume_path), copy);
                }
                if (!slash) {
                        *ret_fd = TAKE_FD(fd);
                        return 0;
                }
                closep(&parent);
                parent = TAKE_FD(fd);
                *slash = '/';
                p = slash + 1;
        }
        /* The last component was empty or "." ("a/", "a/."): what came before it. */
        if (parent >= 0) {
                *ret_fd = TAKE_FD(parent);
                return 0;
        }
        /* Only "." and empty components: the volume root itself. */
        r = openat2_fd(req->volume_fd, ".", O_PATH, RESOLVE_VOLUME);
        if (r < 0)
                return r;
        *ret_fd = r;
        return 0;
}

/* The subPath opened by descriptor, created when missing.  The bind is made
 * of this descriptor: what a symlink swapped in afterwards names no longer
 * matters. */
static int resolve_subpath(const SubpathRequest *req, int *ret_fd, char **ret_error) {
        struct stat root;
        int fd;

        fd = openat2_fd(req->volume_fd, req->subpath, O_PATH, RESOLVE_VOLUME);
        if (fd >= 0) {
                *ret_fd = fd;
                return 0;
        }
        if (fd == -EXDEV || fd == -ELOOP)
                return refuse_escape(req, fd, ret_error);
        if (fd != -ENOENT) {
                set_error(ret_error, "cannot open subPath '%s' of volume '%s': %s", req->subpath,
                          req->volume_name, strerror(-fd));
                return log_fields_errno(LOG_ERR, fd, req->log, "Cannot open subPath %s/%s: %m",
                                        strempty(req->volume_path), req->subpath);
        }
        if (fstat(req->volume_fd, &root) < 0)
                return log_fields_errno(LOG_ERR, errno, req->log, "Cannot stat volume %s: %m",
                                        strempty(req->volume_path));
        return open_or_create(req, root.st_mode & 07777, ret_fd, ret_error);
}

/* ---- the bind target ---- */

static int mkdir_open(int dirfd, const char *name, mode_t mode) {
        if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
                return -errno;
        return openat2_fd(dirfd, name, O_PATH | O_DIRECTORY, RESOLVE_OURS);
}

/* volume-subpaths/<volume>/<container>, each made 0750 as kubelet's MkdirAll. */
static int open_container_dir(const SubpathRequest *req, int *ret_fd) {
        _cleanup_close_ int a = -1, b = -1;
        int c;

        a = mkdir_open(req->pod_dir_fd, SUBPATHS_DIR, 0750);
        if (a < 0)
                return a;
        b = mkdir_open(a, req->volume_name, 0750);
        if (b < 0)
                return b;
        c = mkdir_open(b, req->container_name, 0750);
        if (c < 0)
                return c;
        *ret_fd = c;
        return 0;
}

/* Unmounts the mount at dirfd/name, the entry itself (UMOUNT_NOFOLLOW:
 * never what a symlink there names), through the descriptor of its
 * directory.  Not through a descriptor of the mount itself: that would pin
 * it, and a plain (not lazy) unmount would fail with EBUSY. */
static int unmount_at(int dirfd, const char *name) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/proc/self/fd/%d/%s", dirfd, name) < 0)
                return -ENOMEM;
        return umount2(path, UMOUNT_NOFOLLOW) < 0 ? -errno : 0;
}

/* Removes a non-mount index entry kvolumed may have made: an empty
 * directory or an empty regular file.  -ENOTEMPTY for anything else. */
static int remove_entry(int dirfd, const char *name, const struct statx *sx) {
        if (S_ISDIR(sx->stx_mode))
                return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 ? (errno == ENOENT ? 0 : -errno) : 0;
        if (S_ISREG(sx->stx_mode) && sx->stx_size == 0)
                return unlinkat(dirfd, name, 0) < 0 ? (errno == ENOENT ? 0 : -errno) : 0;
        return -ENOTEMPTY;
}

static int create_target(int cdir, const char *name, bool dir) {
        if (dir)
                return mkdirat(cdir, name, 0750) < 0 && errno != EEXIST ? -errno : 0;
        int fd = open_beneath(cdir, name, O_CREAT | O_WRONLY | O_NOFOLLOW, 0640, false);
        if (fd < 0)
                return fd;
        close(fd);
        return 0;
}

int subpath_prepare(const SubpathRequest *req, char **ret_bind_path, char **ret_error) {
        _cleanup_close_ int src = -1, cdir = -1, dst = -1;
        _cleanup_free_ char *bind_path = NULL;
        struct statx ssx, dsx;
        char index[16], src_proc[64], dst_proc[64];
        int r;

        if (!req || !ret_bind_path || req->volume_fd < 0 || req->pod_dir_fd < 0)
                return -EINVAL;
        r = subpath_validate(req->subpath, ret_error);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, req->log, "Refusing subPath '%s' of volume '%s': %s",
                                        strempty(req->subpath), strempty(req->volume_name),
                                        ret_error && *ret_error ? *ret_error : "invalid");
        if (validate_path_component(req->volume_name) < 0 ||
            validate_path_component(req->container_name) < 0)
                return set_error(ret_error, "invalid volume or container name"),
                       log_fields_errno(
                               LOG_ERR, -EINVAL, req->log,
                               "Refusing subPath: volume name '%s' or container name '%s' cannot be a "
                               "path component",
                               strempty(req->volume_name), strempty(req->container_name));
        snprintf(index, sizeof index, "%u", req->index);
        if (asprintf(&bind_path, "%s/%s/%s/%s/%s", strempty(req->pod_dir_path), SUBPATHS_DIR,
                     req->volume_name, req->container_name, index) < 0)
                return -ENOMEM;

        r = resolve_subpath(req, &src, ret_error);
        if (r < 0)
                return r;
#if KVOLUMED_TEST_HOOKS
        if (subpath_test_after_resolve)
                subpath_test_after_resolve(src, subpath_test_after_resolve_userdata);
#endif
        r = fd_statx(src, &ssx);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, req->log, "Cannot stat subPath %s/%s: %m",
                                        strempty(req->volume_path), req->subpath);

        r = open_container_dir(req, &cdir);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, req->log, "Cannot create %s/%s/%s/%s: %m",
                                        strempty(req->pod_dir_path), SUBPATHS_DIR, req->volume_name,
                                        req->container_name);

        /* What is at the target already: our bind (kept), another bind
         * (replaced), or an entry of the wrong type (replaced). */
        for (int i = 0; i < UNMOUNT_MAX; i++) {
                closep(&dst);
                dst = openat2_fd(cdir, index, O_PATH | O_NOFOLLOW, RESOLVE_OURS);
                if (dst == -ENOENT)
                        break;
                if (dst < 0)
                        return log_fields_errno(LOG_ERR, dst, req->log, "Cannot open %s: %m", bind_path);
                r = fd_statx(dst, &dsx);
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, req->log, "Cannot stat %s: %m", bind_path);
                if (statx_mount_root(&dsx)) {
                        if (statx_dev(&dsx) == statx_dev(&ssx) && dsx.stx_ino == ssx.stx_ino) {
                                log_fields(LOG_DEBUG, req->log, "subPath %s/%s already bound at %s",
                                           strempty(req->volume_path), req->subpath, bind_path);
                                goto bound;
                        }
                        closep(&dst);
                        r = unmount_at(cdir, index);
                        if (r < 0)
                                return log_fields_errno(LOG_ERR, r, req->log,
                                                        "Cannot unmount %s, a bind of something other than "
                                                        "subPath '%s': %m",
                                                        bind_path, req->subpath);
                        log_fields(LOG_INFO, req->log,
                                   "Unmounted %s: it bound something other than subPath '%s'", bind_path,
                                   req->subpath);
                        continue;
                }
                if (S_ISDIR(dsx.stx_mode) == S_ISDIR(ssx.stx_mode) &&
                    (S_ISDIR(dsx.stx_mode) || S_ISREG(dsx.stx_mode)))
                        break; /* a target of the right type, left by a crash */
                r = remove_entry(cdir, index, &dsx);
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, req->log,
                                                "%s is in the way of subPath '%s' and is not kvolumed's: "
                                                "remove it by hand: %m",
                                                bind_path, req->subpath);
        }
        closep(&dst);
        r = create_target(cdir, index, S_ISDIR(ssx.stx_mode));
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, req->log, "Cannot create %s: %m", bind_path);
        dst = openat2_fd(cdir, index, O_PATH | O_NOFOLLOW, RESOLVE_OURS);
        if (dst < 0)
                return log_fields_errno(LOG_ERR, dst, req->log, "Cannot open %s: %m", bind_path);

        snprintf(src_proc, sizeof src_proc, "/proc/self/fd/%d", src);
        snprintf(dst_proc, sizeof dst_proc, "/proc/self/fd/%d", dst);
        if (mount(src_proc, dst_proc, "none", MS_BIND, NULL) < 0)
                return log_fields_errno(LOG_ERR, errno, req->log,
                                        "Cannot bind-mount subPath %s/%s onto %s: %m",
                                        strempty(req->volume_path), req->subpath, bind_path);
        log_fields(LOG_INFO, req->log, "Bind-mounted subPath %s/%s onto %s", strempty(req->volume_path),
                   req->subpath, bind_path);

bound:
        /* The bind's own root, for the read-only remount and the check. */
        closep(&dst);
        dst = openat2_fd(cdir, index, O_PATH | O_NOFOLLOW, RESOLVE_OURS);
        if (dst < 0)
                return log_fields_errno(LOG_ERR, dst, req->log, "Cannot open %s: %m", bind_path);
        r = fd_statx(dst, &dsx);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, req->log, "Cannot stat %s: %m", bind_path);
        if (!statx_mount_root(&dsx) || statx_dev(&dsx) != statx_dev(&ssx) || dsx.stx_ino != ssx.stx_ino)
                return log_fields_errno(LOG_ERR, -EIO, req->log,
                                        "%s does not show subPath %s/%s after the bind: another process is "
                                        "mounting there",
                                        bind_path, strempty(req->volume_path), req->subpath);
        if (req->read_only) {
                struct statvfs sv;
                /* A remount sets every per-mount flag: those the bind took from
                 * the volume's mount (nosuid, nodev, noexec...) are kept. */
                if (fstatvfs(dst, &sv) < 0)
                        return log_fields_errno(LOG_ERR, errno, req->log, "Cannot statvfs %s: %m",
                                                bind_path);
                snprintf(dst_proc, sizeof dst_proc, "/proc/self/fd/%d", dst);
                if (mount("none", dst_proc, "none",
                          MS_BIND | MS_REMOUNT | MS_RDONLY | (sv.f_flag & KEPT_FLAGS), NULL) < 0)
                        return log_fields_errno(LOG_ERR, errno, req->log, "Cannot remount %s read-only: %m",
                                                bind_path);
        }
        *ret_bind_path = TAKE_PTR(bind_path);
        return 0;
}

/* ---- cleanup ---- */

typedef int (*entry_fn)(int dirfd, const char *name, void *userdata);

/* Calls fn for each entry of dirfd but "." and "..". */
static int for_each_entry(int dirfd, entry_fn fn, void *userdata) {
        _cleanup_(closedirp) DIR *d = NULL;
        int fd, r = 0;

        fd = openat2_fd(dirfd, ".", O_RDONLY | O_DIRECTORY, RESOLVE_OURS);
        if (fd < 0)
                return fd;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        for (struct dirent *de; (errno = 0, de = readdir(d));) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                int k = fn(dirfd, de->d_name, userdata);
                if (k < 0 && r == 0)
                        r = k;
        }
        return r;
}

typedef struct CleanCtx {
        const char *dir_path; /* the directory's path, for messages */
        const LogFields *log;
} CleanCtx;

static int clean_index(int cdir, const char *name, void *userdata) {
        CleanCtx *c = userdata;
        struct statx sx;
        int r;

        for (int i = 0;; i++) {
                int fd = openat2_fd(cdir, name, O_PATH | O_NOFOLLOW, RESOLVE_OURS);
                if (fd == -ENOENT)
                        return 0;
                if (fd < 0)
                        return log_fields_errno(LOG_ERR, fd, c->log, "Cannot open %s/%s: %m", c->dir_path,
                                                name);
                r = fd_statx(fd, &sx);
                close(fd); /* before the unmount: it would pin the mount */
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, c->log, "Cannot stat %s/%s: %m", c->dir_path,
                                                name);
                if (!statx_mount_root(&sx))
                        break;
                if (i >= UNMOUNT_MAX)
                        return log_fields_errno(
                                LOG_ERR, -EBUSY, c->log,
                                "%s/%s is still a mount after %d unmounts: unmount it by hand", c->dir_path,
                                name, UNMOUNT_MAX);
                r = unmount_at(cdir, name);
                if (r < 0)
                        return log_fields_errno(
                                LOG_ERR, r, c->log,
                                "Cannot unmount subPath bind %s/%s: %m; a process may still use "
                                "it (fuser -m), the volume stays until it is unmounted",
                                c->dir_path, name);
                log_fields(LOG_INFO, c->log, "Unmounted subPath bind %s/%s", c->dir_path, name);
        }
        r = remove_entry(cdir, name, &sx);
        if (r == -ENOTEMPTY)
                return log_fields_errno(LOG_WARNING, r, c->log,
                                        "Leaving %s/%s alone: not a subPath bind and not an empty file or "
                                        "directory kvolumed made; remove it by hand to let the volume go",
                                        c->dir_path, name);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, c->log, "Cannot remove %s/%s: %m", c->dir_path, name);
        return 0;
}

static int clean_container(int vdir, const char *name, void *userdata) {
        CleanCtx *c = userdata, sub = { .log = c->log };
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int cdir = -1;
        int r;

        if (asprintf(&path, "%s/%s", c->dir_path, name) < 0)
                return -ENOMEM;
        cdir = openat2_fd(vdir, name, O_PATH | O_DIRECTORY, RESOLVE_OURS);
        if (cdir == -ENOENT)
                return 0;
        if (cdir < 0)
                return log_fields_errno(LOG_WARNING, cdir == -ENOTDIR || cdir == -ELOOP ? -ENOTEMPTY : cdir,
                                        c->log, "Leaving %s alone: not a directory kvolumed made (%s)", path,
                                        strerror(-cdir));
        sub.dir_path = path;
        r = for_each_entry(cdir, clean_index, &sub);
        if (r < 0)
                return r;
        if (unlinkat(vdir, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return log_fields_errno(LOG_ERR, errno, c->log, "Cannot remove %s: %m", path);
        return 0;
}

int subpath_cleanup(int pod_dir_fd, const char *pod_dir_path, const char *volume_name,
                    const LogFields *log) {
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int sdir = -1, vdir = -1;
        CleanCtx c = { .log = log };
        int r;

        if (pod_dir_fd < 0 || validate_path_component(volume_name) < 0)
                return -EINVAL;
        if (asprintf(&path, "%s/%s/%s", strempty(pod_dir_path), SUBPATHS_DIR, volume_name) < 0)
                return -ENOMEM;
        sdir = openat2_fd(pod_dir_fd, SUBPATHS_DIR, O_PATH | O_DIRECTORY, RESOLVE_OURS);
        if (sdir == -ENOENT)
                return 0;
        if (sdir < 0)
                return log_fields_errno(LOG_ERR, sdir, log, "Cannot open %s/%s: %m", strempty(pod_dir_path),
                                        SUBPATHS_DIR);
        vdir = openat2_fd(sdir, volume_name, O_PATH | O_DIRECTORY, RESOLVE_OURS);
        if (vdir == -ENOENT)
                return 0;
        if (vdir < 0)
                return log_fields_errno(LOG_ERR, vdir, log, "Cannot open %s: %m", path);
        c.dir_path = path;
        r = for_each_entry(vdir, clean_container, &c);
        if (r < 0)
                return r;
        if (unlinkat(sdir, volume_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return log_fields_errno(LOG_ERR, errno, log, "Cannot remove %s: %m", path);
        /* Other volumes' subpaths may still be there: then it stays. */
        if (unlinkat(pod_dir_fd, SUBPATHS_DIR, AT_REMOVEDIR) < 0 && errno != ENOENT && errno != ENOTEMPTY &&
            errno != EEXIST)
                return log_fields_errno(LOG_ERR, errno, log, "Cannot remove %s/%s: %m",
                                        strempty(pod_dir_path), SUBPATHS_DIR);
        log_fields(LOG_DEBUG, log, "Removed the subPath binds of %s", path);
        return 0;
}

typedef struct PodCleanCtx {
        int pod_dir_fd;
        const char *pod_dir_path;
        const LogFields *log;
} PodCleanCtx;

static int clean_volume(int sdir, const char *name, void *userdata) {
        PodCleanCtx *c = userdata;
        (void) sdir;
        if (validate_path_component(name) < 0)
                return log_fields_errno(LOG_WARNING, -ENOTEMPTY, c->log,
                                        "Leaving %s/%s/%s alone: not a name kvolumed makes", c->pod_dir_path,
                                        SUBPATHS_DIR, name);
        return subpath_cleanup(c->pod_dir_fd, c->pod_dir_path, name, c->log);
}

int subpath_cleanup_pod(int pod_dir_fd, const char *pod_dir_path, const LogFields *log) {
        _cleanup_close_ int sdir = -1;
        PodCleanCtx c = { .pod_dir_fd = pod_dir_fd, .pod_dir_path = strempty(pod_dir_path), .log = log };
        int r;

        if (pod_dir_fd < 0)
                return -EINVAL;
        sdir = openat2_fd(pod_dir_fd, SUBPATHS_DIR, O_PATH | O_DIRECTORY, RESOLVE_OURS);
        if (sdir == -ENOENT)
                return 0;
        if (sdir < 0)
                return log_fields_errno(LOG_ERR, sdir, log, "Cannot open %s/%s: %m", c.pod_dir_path,
                                        SUBPATHS_DIR);
        r = for_each_entry(sdir, clean_volume, &c);
        if (r < 0)
                return r;
        if (unlinkat(pod_dir_fd, SUBPATHS_DIR, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return log_fields_errno(LOG_ERR, errno, log, "Cannot remove %s/%s: %m", c.pod_dir_path,
                                        SUBPATHS_DIR);
        return 0;
}

/* ---- listing ---- */

void subpath_binds_free(SubpathBind *b, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(b[i].path);
                free(b[i].container);
                free(b[i].index);
        }
        free(b);
}

typedef struct ListCtx {
        const char *dir_path;
        const char *container;
        SubpathBind *binds;
        size_t n;
} ListCtx;

static int list_index(int cdir, const char *name, void *userdata) {
        ListCtx *l = userdata;
        _cleanup_close_ int fd = openat2_fd(cdir, name, O_PATH | O_NOFOLLOW, RESOLVE_OURS);
        struct statx sx;
        SubpathBind *grown, *b;

        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return fd;
        if (fd_statx(fd, &sx) < 0)
                return -errno;
        grown = realloc(l->binds, (l->n + 1) * sizeof *l->binds);
        if (!grown)
                return -ENOMEM;
        l->binds = grown;
        b = &l->binds[l->n];
        *b = (SubpathBind){
                .mounted = statx_mount_root(&sx),
                .dev = statx_dev(&sx),
                .ino = sx.stx_ino,
        };
        b->mnt_id = b->mounted ? sx.stx_mnt_id : 0;
        b->container = strdup(l->container);
        b->index = strdup(name);
        if (asprintf(&b->path, "%s/%s/%s", l->dir_path, l->container, name) < 0)
                b->path = NULL;
        l->n++;
        return b->container && b->index && b->path ? 0 : -ENOMEM;
}

static int list_container(int vdir, const char *name, void *userdata) {
        ListCtx *l = userdata;
        _cleanup_close_ int cdir = openat2_fd(vdir, name, O_PATH | O_DIRECTORY, RESOLVE_OURS);
        if (cdir == -ENOENT || cdir == -ENOTDIR || cdir == -ELOOP)
                return 0; /* not ours: nothing bound there */
        if (cdir < 0)
                return cdir;
        l->container = name;
        return for_each_entry(cdir, list_index, l);
}

int subpath_list(int pod_dir_fd, const char *pod_dir_path, const char *volume_name, SubpathBind **ret,
                 size_t *ret_n) {
        _cleanup_free_ char *path = NULL, *rel = NULL;
        _cleanup_close_ int vdir = -1;
        ListCtx l = {};
        int r;

        if (pod_dir_fd < 0 || !ret || !ret_n || validate_path_component(volume_name) < 0)
                return -EINVAL;
        *ret = NULL;
        *ret_n = 0;
        if (asprintf(&path, "%s/%s/%s", strempty(pod_dir_path), SUBPATHS_DIR, volume_name) < 0 ||
            asprintf(&rel, "%s/%s", SUBPATHS_DIR, volume_name) < 0)
                return -ENOMEM;
        vdir = openat2_fd(pod_dir_fd, rel, O_PATH | O_DIRECTORY, RESOLVE_OURS);
        if (vdir == -ENOENT)
                return 0;
        if (vdir < 0)
                return vdir;
        l.dir_path = path;
        r = for_each_entry(vdir, list_container, &l);
        if (r < 0) {
                subpath_binds_free(l.binds, l.n);
                return r;
        }
        *ret = l.binds;
        *ret_n = l.n;
        return 0;
}
