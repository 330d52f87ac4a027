/* SPDX-License-Identifier: Apache-2.0 */
/* The atomic writer of configMap, secret, downwardAPI and projected volumes,
 * with kubelet's layout and rules (atomic_writer.go), done by descriptor.
 * Where it departs from kubelet it is on the safe side:
 * - the symlinks of new top-level names are made before the swap, and those
 *   of names gone are removed after it, so that at every instant what
 *   resolves through the volume is exactly one version (kubelet makes the new
 *   ones after the swap, for Windows' sake);
 * - equality covers modes and owners too, not only the bytes, so that a
 *   changed defaultMode or fsGroup reaches the files;
 * - fsGroup is applied to the new version before the swap (kubelet did it
 *   after the write in older releases, before the swap in newer ones);
 * - leftovers of a crash (a "..data_tmp", versions "..data" does not name)
 *   are removed by the next write, and only what the writer makes is ever
 *   removed: "<name> -> ..data/<name>" symlinks and directories named like a
 *   version, never entering another mount. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "systemd/fileio.h"
#include "volume/host/atomicwriter.h"

#define DATA_LINK_PREFIX ATOMIC_DATA_DIR "/"
/* A symlink put in place of one not made by kvolumed, renamed over it. */
#define LINK_TMP "..link_tmp"
/* The readable part of the version name: "..2006_01_02_15_04_05." */
#define TS_PREFIX_LEN 22

/* Read-only kinds: kubelet's roMask, and execMask for directories. */
#define FSGROUP_FILE_BITS 0440
#define FSGROUP_DIR_BITS (0550 | S_ISGID)

typedef struct Entry {
        char *path; /* cleaned */
        const AtomicPayloadFile *f;
        size_t index; /* in the payload: the last of a path wins */
} Entry;

typedef struct Writer {
        int dfd; /* dir_fd's directory, readable, for fdopendir/fchmod */
        uint64_t mnt_id;
        const AtomicWriteOptions *o;
        char *reason;
        bool changed;
} Writer;

/* ---- payloads ------------------------------------------------------------- */

int atomic_payload_add(AtomicPayload *p, const char *path, const void *data, size_t size, mode_t mode,
                       uid_t uid) {
        _cleanup_free_ char *copy = strdup(path);
        _cleanup_free_ uint8_t *bytes = malloc(size > 0 ? size : 1);
        AtomicPayloadFile *files;

        if (!copy || !bytes)
                return -ENOMEM;
        if (size > 0)
                memcpy(bytes, data, size);
        files = reallocarray(p->files, p->n + 1, sizeof *files);
        if (!files)
                return -ENOMEM;
        p->files = files;
        p->files[p->n++] = (AtomicPayloadFile){
                .path = TAKE_PTR(copy), .data = TAKE_PTR(bytes), .size = size, .mode = mode, .uid = uid
        };
        return 0;
}

void atomic_payload_done(AtomicPayload *p) {
        for (size_t i = 0; i < p->n; i++) {
                free(p->files[i].path);
                /* A secret's bytes (the payload, or what was read back to
                 * compare) must not linger in freed memory. */
                if (p->files[i].data)
                        explicit_bzero(p->files[i].data, p->files[i].size);
                free(p->files[i].data);
        }
        free(p->files);
        *p = (AtomicPayload){};
}

static int file_cmp(const void *a, const void *b) {
        return strcmp(((const AtomicPayloadFile *) a)->path, ((const AtomicPayloadFile *) b)->path);
}

/* ---- paths ---------------------------------------------------------------- */

int atomic_payload_validate_path(const char *path, const char **ret_reason) {
        const char *reason = NULL, *first = NULL;
        size_t depth = 0;

        if (!path || !*path)
                reason = "must not be empty";
        else if (path[0] == '/')
                reason = "must be a relative path";
        else if (strlen(path) > ATOMIC_MAX_PATH)
                reason = "must be at most 4096 characters";
        else
                for (const char *c = path; *c;) {
                        size_t len = strcspn(c, "/");

                        if (len == 2 && c[0] == '.' && c[1] == '.') {
                                reason = "must not contain '..'";
                                break;
                        }
                        if (len > ATOMIC_MAX_NAME) {
                                reason = "file names must be at most 255 characters";
                                break;
                        }
                        /* The first element that names something: "./..data" is "..data". */
                        if (len > 0 && !(len == 1 && c[0] == '.')) {
                                if (!first)
                                        first = c;
                                depth++;
                        }
                        c += len;
                        if (*c == '/')
                                c++;
                }
        if (!reason && depth == 0)
                reason = "must name a file";
        if (!reason && first[0] == '.' && first[1] == '.')
                reason = "must not start with '..' (names kept for the writer's own files)";
        if (!reason && depth > ATOMIC_MAX_DEPTH)
                reason = "must have at most 64 elements";
        if (ret_reason)
                *ret_reason = reason;
        return reason ? -EINVAL : 0;
}

/* kubelet's filepath.Clean of a valid path: without empty and "." elements. */
static int clean_path(const char *path, char **ret) {
        char *out = malloc(strlen(path) + 1), *o = out;

        if (!out)
                return -ENOMEM;
        for (const char *c = path; *c;) {
                size_t len = strcspn(c, "/");

                if (len > 0 && !(len == 1 && c[0] == '.')) {
                        if (o != out)
                                *o++ = '/';
                        memcpy(o, c, len);
                        o += len;
                }
                c += len;
                if (*c == '/')
                        c++;
        }
        *o = '\0';
        *ret = out;
        return 0;
}

static bool is_version_name(const char *name) {
        static const char shape[] = "..dddd_dd_dd_dd_dd_dd.";

        if (strlen(name) <= TS_PREFIX_LEN || strchr(name, '/'))
                return false;
        for (size_t i = 0; i < TS_PREFIX_LEN; i++)
                if (shape[i] == 'd' ? (name[i] < '0' || name[i] > '9') : name[i] != shape[i])
                        return false;
        return true;
}

static size_t top_len(const char *path) {
        return strcspn(path, "/");
}

/* ---- notes, reasons, logs ------------------------------------------------- */

static void note(Writer *w, const char *relpath, AtomicChange kind) {
        if (w->o->note_changed)
                w->o->note_changed(relpath, kind, w->o->userdata);
}

/* The directory holding relpath's entry. */
static void note_parent(Writer *w, const char *relpath) {
        const char *slash = strrchr(relpath, '/');
        _cleanup_free_ char *dir = NULL;

        if (!slash) {
                note(w, "", ATOMIC_CHANGED_DIR);
                return;
        }
        dir = strndup(relpath, (size_t) (slash - relpath));
        if (dir)
                note(w, dir, ATOMIC_CHANGED_DIR);
        else
                note(w, "",
                     ATOMIC_CHANGED_DIR); /* out of memory: at least the root, the caller syncs broadly */
}

static const char *where(Writer *w) {
        return w->o->path ? w->o->path : "the volume directory";
}

/* Records the first reason for the operator, logs it, returns r. */
_printf_(3, 4) static int fail(Writer *w, int r, const char *format, ...) {
        va_list ap;
        char *msg = NULL;

        va_start(ap, format);
        if (vasprintf(&msg, format, ap) < 0)
                msg = NULL;
        va_end(ap);
        log_fields_errno(LOG_DEBUG, r, w->o->log, "Atomic write into %s: %s: %m", where(w),
                         msg ? msg : "(no memory for the reason)");
        if (!w->reason)
                w->reason = msg;
        else
                free(msg);
        return r < 0 ? r : -r;
}

/* ---- the payload in order --------------------------------------------------- */

static void entries_free(Entry *e, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(e[i].path);
        free(e);
}

static int entry_cmp(const void *a, const void *b) {
        const Entry *x = a, *y = b;
        int c = strcmp(x->path, y->path);

        return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

static const Entry *entry_find(const Entry *e, size_t n, const char *path) {
        Entry key = { .path = (char *) path };
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(key.path, e[mid].path);
                if (c == 0)
                        return &e[mid];
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return NULL;
}

/* Validated, cleaned, sorted, one entry per path (the last given), and no
 * path that is both a file and the directory of another. */
static int build_entries(Writer *w, const AtomicPayload *payload, Entry **ret, size_t *ret_n) {
        Entry *e = NULL;
        size_t n = 0, kept = 0;
        int r;

        if (payload->n > 0 && !(e = calloc(payload->n, sizeof *e)))
                return -ENOMEM;
        for (; n < payload->n; n++) {
                const char *reason;

                r = atomic_payload_validate_path(payload->files[n].path, &reason);
                if (r < 0) {
                        entries_free(e, n);
                        return fail(w, r, "invalid path \"%s\": %s", strempty(payload->files[n].path),
                                    reason);
                }
                r = clean_path(payload->files[n].path, &e[n].path);
                if (r < 0) {
                        entries_free(e, n);
                        return r;
                }
                e[n].f = &payload->files[n];
                e[n].index = n;
        }
        if (n > 0)
                qsort(e, n, sizeof *e, entry_cmp);
        for (size_t i = 0; i < n; i++) {
                if (i + 1 < n && streq(e[i].path, e[i + 1].path)) {
                        free(e[i].path);
                        continue;
                }
                e[kept++] = e[i];
        }
        n = kept;
        for (size_t i = 0; i < n; i++)
                for (const char *s = strchr(e[i].path, '/'); s; s = strchr(s + 1, '/')) {
                        _cleanup_free_ char *dir = strndup(e[i].path, (size_t) (s - e[i].path));

                        if (!dir) {
                                entries_free(e, n);
                                return -ENOMEM;
                        }
                        if (entry_find(e, n, dir)) {
                                r = fail(w, -EINVAL,
                                         "invalid payload: \"%.*s\" is a file and the directory of \"%s\"",
                                         (int) (s - e[i].path), e[i].path, e[i].path);
                                entries_free(e, n);
                                return r;
                        }
                }
        *ret = e;
        *ret_n = n;
        return 0;
}

static mode_t file_mode(Writer *w, const AtomicPayloadFile *f) {
        return (f->mode & 07777) | (w->o->has_fs_group ? FSGROUP_FILE_BITS : 0);
}

static mode_t dir_mode(Writer *w) {
        return 0755 | (w->o->has_fs_group ? FSGROUP_DIR_BITS : 0);
}

/* ---- reading a version back ------------------------------------------------- */

static int mount_id(int fd, const char *name, uint64_t *ret) {
        struct statx sx;

        if (statx(fd, name, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_MNT_ID, &sx) < 0)
                return -errno;
        if (!(sx.stx_mask & STATX_MNT_ID))
                return -EOPNOTSUPP;
        *ret = sx.stx_mnt_id;
        return 0;
}

/* Opens a directory below fd, never through a symlink nor onto another mount. */
static int open_dir_beneath(int fd, const char *name, uint64_t mnt_id, int *ret) {
        _cleanup_close_ int d = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        uint64_t id = 0; /* gcc -O2 -flto cannot see mount_id() sets it on success */
        int r;

        if (d < 0)
                return -errno;
        r = mount_id(d, "", &id);
        if (r < 0)
                return r;
        if (id != mnt_id)
                return -EXDEV;
        *ret = TAKE_FD(d);
        return 0;
}

/* The names in a directory, so that it can be changed while they are used. */
static int list_dir(int fd, char ***ret, size_t *ret_n) {
        _cleanup_close_ int d = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char **names = NULL;
        size_t n = 0;
        DIR *dir;
        struct dirent *de;
        int r = 0;

        if (d < 0)
                return -errno;
        dir = fdopendir(d);
        if (!dir)
                return -errno;
        TAKE_FD(d);
        errno = 0;
        while ((de = readdir(dir))) {
                char **grown;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                grown = reallocarray(names, n + 1, sizeof *names);
                if (!grown || !(grown[n] = strdup(de->d_name))) {
                        names = grown ? grown : names;
                        r = -ENOMEM;
                        break;
                }
                names = grown;
                n++;
                errno = 0;
        }
        if (r == 0 && errno != 0)
                r = -errno;
        closedir(dir);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(names[i]);
                free(names);
                return r;
        }
        *ret = names;
        *ret_n = n;
        return 0;
}

static void names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

static int read_file_at(int fd, const char *name, const struct stat *st, AtomicPayload *p,
                        const char *path) {
        _cleanup_close_ int f = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        _cleanup_free_ uint8_t *data = NULL;
        size_t size = (size_t) st->st_size, got = 0;
        AtomicPayloadFile *files;

        if (f < 0)
                return -errno;
        if (st->st_size < 0 || (uint64_t) st->st_size > ATOMIC_MAX_FILE_SIZE)
                return -EUCLEAN;
        data = malloc(size > 0 ? size : 1);
        if (!data)
                return -ENOMEM;
        while (got < size) {
                ssize_t k = read(f, data + got, size - got);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break; /* shrunk meanwhile: what is there */
                got += (size_t) k;
        }
        files = reallocarray(p->files, p->n + 1, sizeof *files);
        if (!files)
                return -ENOMEM;
        p->files = files;
        p->files[p->n] = (AtomicPayloadFile){ .path = strdup(path),
                                              .data = TAKE_PTR(data),
                                              .size = got,
                                              .mode = st->st_mode & 07777,
                                              .uid = st->st_uid };
        if (!p->files[p->n].path) {
                free(p->files[p->n].data);
                return -ENOMEM;
        }
        p->n++;
        return 0;
}

/* Walks a version; gids: each file's group, in the order of p->files. */
static int read_tree(int fd, const char *prefix, unsigned depth, uint64_t mnt_id, AtomicPayload *p,
                     gid_t **gids) {
        char **names = NULL;
        size_t n = 0;
        int r;

        if (depth > ATOMIC_MAX_DEPTH)
                return -EUCLEAN;
        r = list_dir(fd, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_free_ char *path = NULL;
                struct stat st;

                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", names[i]) < 0) {
                        path = NULL;
                        r = -ENOMEM;
                        break;
                }
                if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        break;
                }
                if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = -EBADF;
                        r = open_dir_beneath(fd, names[i], mnt_id, &sub);
                        if (r == -EXDEV || r == -ELOOP)
                                r = -EUCLEAN;
                        if (r >= 0)
                                r = read_tree(sub, path, depth + 1, mnt_id, p, gids);
                } else if (S_ISREG(st.st_mode)) {
                        r = read_file_at(fd, names[i], &st, p, path);
                        if (r >= 0 && gids) {
                                gid_t *g = reallocarray(*gids, p->n, sizeof **gids);
                                if (!g)
                                        r = -ENOMEM;
                                else {
                                        *gids = g;
                                        g[p->n - 1] = st.st_gid;
                                }
                        }
                } else
                        r = -EUCLEAN;
        }
        names_free(names, n);
        return r;
}

/* The version "..data" names: 1 and *ret set, 0 when there is none (or a
 * "..data" symlink not to a version: replaced by the swap, never followed). */
static int current_version(int dfd, char **ret) {
        char buf[PATH_MAX];
        ssize_t k = readlinkat(dfd, ATOMIC_DATA_DIR, buf, sizeof buf - 1);

        *ret = NULL;
        if (k < 0) {
                if (errno == ENOENT)
                        return 0;
                return -errno; /* EINVAL: "..data" is not a symlink */
        }
        buf[k] = '\0';
        if (!is_version_name(buf))
                return 0;
        *ret = strdup(buf);
        return *ret ? 1 : -ENOMEM;
}

static int read_version(int dfd, uint64_t mnt_id, const char *version, AtomicPayload *ret, gid_t **gids) {
        _cleanup_close_ int vfd = -EBADF;
        AtomicPayload p = {};
        int r;

        r = open_dir_beneath(dfd, version, mnt_id, &vfd);
        if (r == -EXDEV || r == -ELOOP || r == -ENOTDIR)
                return -EUCLEAN;
        if (r < 0)
                return r;
        r = read_tree(vfd, "", 1, mnt_id, &p, gids);
        if (r < 0) {
                atomic_payload_done(&p);
                return r;
        }
        /* gids (when asked) follow the walk's order: compare unsorted. */
        if (!gids && p.n > 0)
                qsort(p.files, p.n, sizeof *p.files, file_cmp);
        *ret = p;
        return 0;
}

int atomic_read_current(int dir_fd, AtomicPayload *ret) {
        _cleanup_free_ char *version = NULL;
        uint64_t mnt_id;
        int r;

        r = mount_id(dir_fd, "", &mnt_id);
        if (r < 0)
                return r;
        r = current_version(dir_fd, &version);
        if (r == -EINVAL)
                return -EUCLEAN;
        if (r < 0)
                return r;
        if (r == 0) {
                *ret = (AtomicPayload){};
                return 0;
        }
        return read_version(dir_fd, mnt_id, version, ret, NULL);
}

/* Does the version hold exactly the entries, with their modes and owners? */
static bool version_equal(Writer *w, const char *version, const Entry *e, size_t n) {
        AtomicPayload cur = {};
        _cleanup_free_ gid_t *gids = NULL;
        size_t matched = 0;
        bool equal;
        int r;

        r = read_version(w->dfd, w->mnt_id, version, &cur, &gids);
        if (r < 0) {
                log_fields_errno(LOG_DEBUG, r, w->o->log,
                                 "Atomic write into %s: version %s unreadable, rewriting: %m", where(w),
                                 version);
                return false;
        }
        equal = cur.n == n;
        for (size_t i = 0; equal && i < cur.n; i++) {
                const AtomicPayloadFile *c = &cur.files[i];
                const Entry *x = entry_find(e, n, c->path);

                equal = x && c->size == x->f->size &&
                        (c->size == 0 || memcmp(c->data, x->f->data, c->size) == 0) &&
                        c->mode == file_mode(w, x->f) &&
                        (x->f->uid == ATOMIC_UID_NONE || c->uid == x->f->uid) &&
                        (!w->o->has_fs_group || gids[i] == w->o->fs_group);
                matched++;
        }
        atomic_payload_done(&cur);
        return equal && matched == n;
}

/* ---- removal ---------------------------------------------------------------- */

/* Removes name below fd and, for a directory, what it holds: entry by entry,
 * never through a symlink, never into another mount (-EBUSY, left). */
static int remove_tree(Writer *w, int fd, const char *name, const char *relpath, unsigned depth) {
        _cleanup_close_ int sub = -EBADF;
        char **names = NULL;
        size_t n = 0;
        struct stat st;
        int r;

        if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode)) {
                if (unlinkat(fd, name, 0) < 0 && errno != ENOENT)
                        return -errno;
                note_parent(w, relpath);
                return 0;
        }
        if (depth > ATOMIC_MAX_DEPTH + 1)
                return -ELOOP;
        r = open_dir_beneath(fd, name, w->mnt_id, &sub);
        if (r == -EXDEV)
                return fail(w, -EBUSY,
                            "%s/%s is a mount point inside an old version: left in place, unmount it",
                            where(w), relpath);
        if (r < 0)
                return r;
        r = list_dir(sub, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", relpath, names[i]) < 0)
                        r = -ENOMEM;
                else
                        r = remove_tree(w, sub, names[i], p, depth + 1);
        }
        names_free(names, n);
        if (r < 0)
                return r;
        if (unlinkat(fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return -errno;
        note_parent(w, relpath);
        return 0;
}

/* Leftovers of an interrupted write: the temporary symlinks and every
 * version but "keep". */
static int remove_leftovers(Writer *w, const char *keep) {
        char **names = NULL;
        size_t n = 0;
        int r, ret = 0;

        r = list_dir(w->dfd, &names, &n);
        if (r < 0)
                return fail(w, r, "cannot list the volume directory");
        for (size_t i = 0; i < n; i++) {
                struct stat st;

                if (streq(names[i], ATOMIC_DATA_TMP) || streq(names[i], LINK_TMP)) {
                        if (fstatat(w->dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISLNK(st.st_mode))
                                continue;
                        if (unlinkat(w->dfd, names[i], 0) < 0 && errno != ENOENT) {
                                r = fail(w, -errno, "cannot remove the leftover %s", names[i]);
                                ret = ret < 0 ? ret : r;
                                continue;
                        }
                        note(w, "", ATOMIC_CHANGED_DIR);
                        log_fields(LOG_DEBUG, w->o->log, "Atomic write into %s: removed the leftover %s",
                                   where(w), names[i]);
                } else if (is_version_name(names[i]) && !streq_ptr(names[i], keep)) {
                        r = remove_tree(w, w->dfd, names[i], names[i], 1);
                        if (r < 0) {
                                r = fail(w, r, "cannot remove the version %s no longer in use", names[i]);
                                ret = ret < 0 ? ret : r;
                                continue;
                        }
                        log_fields(LOG_DEBUG, w->o->log, "Atomic write into %s: removed the version %s",
                                   where(w), names[i]);
                }
        }
        names_free(names, n);
        return ret;
}

/* ---- writing a version ------------------------------------------------------ */

static int set_owner_mode(Writer *w, int fd, uid_t uid, mode_t mode) {
        gid_t gid = w->o->has_fs_group ? w->o->fs_group : (gid_t) -1;

        /* chown before chmod: a chown may clear the set-id bits. */
        if ((uid != ATOMIC_UID_NONE || gid != (gid_t) -1) && fchown(fd, uid, gid) < 0)
                return -errno;
        if (fchmod(fd, mode) < 0)
                return -errno;
        return 0;
}

/* One file of the new version, its directories made on the way. */
static int write_entry(Writer *w, int vfd, const char *version, const Entry *e) {
        _cleanup_close_ int cur = fcntl(vfd, F_DUPFD_CLOEXEC, 3), f = -EBADF;
        _cleanup_free_ char *rel = NULL;
        const char *c = e->path;
        size_t len;
        int r;

        if (cur < 0)
                return -errno;
        if (asprintf(&rel, "%s/%s", version, e->path) < 0) {
                rel = NULL;
                return -ENOMEM;
        }
        while (c[len = strcspn(c, "/")] == '/') {
                _cleanup_free_ char *name = strndup(c, len);
                int next;

                if (!name)
                        return -ENOMEM;
                if (mkdirat(cur, name, 0700) >= 0) {
                        size_t end = strlen(version) + 1 + (size_t) (c - e->path);
                        rel[end + len] = '\0';
                        note_parent(w, rel);
                        rel[end + len] = '/';
                        next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (next < 0)
                                return -errno;
                        r = set_owner_mode(w, next, ATOMIC_UID_NONE, dir_mode(w));
                        if (r >= 0 && w->o->sync && fsync(cur) < 0)
                                r = -errno;
                        if (r < 0) {
                                close(next);
                                return r;
                        }
                } else if (errno == EEXIST) {
                        next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (next < 0)
                                return -errno;
                } else
                        return -errno;
                close(cur);
                cur = next;
                c += len + 1;
        }
        f = openat(cur, c, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (f < 0)
                return -errno;
        r = loop_write(f, e->f->data, e->f->size);
        if (r < 0)
                return r;
        r = set_owner_mode(w, f, e->f->uid, file_mode(w, e->f));
        if (r < 0)
                return r;
        if (w->o->sync && (fsync(f) < 0 || fsync(cur) < 0))
                return -errno;
        note(w, rel, ATOMIC_CHANGED_FILE);
        note_parent(w, rel);
        return 0;
}

static int new_version_name(char **ret) {
        char stamp[32];
        struct tm tm;
        time_t now = time(NULL);
        uint32_t rnd;

        if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "..%Y_%m_%d_%H_%M_%S.", &tm) == 0)
                return -EINVAL;
        if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
                return -errno;
        return asprintf(ret, "%s%u", stamp, rnd) < 0 ? -ENOMEM : 0;
}

static int write_version(Writer *w, const Entry *e, size_t n, char **ret) {
        _cleanup_free_ char *version = NULL;
        _cleanup_close_ int vfd = -EBADF;
        int r;

        for (unsigned attempt = 0;; attempt++) {
                version = mfree_str(version);
                r = new_version_name(&version);
                if (r < 0)
                        return fail(w, r, "cannot name a new version");
                if (mkdirat(w->dfd, version, 0700) >= 0)
                        break;
                if (errno != EEXIST || attempt >= 16)
                        return fail(w, -errno, "cannot create the directory %s", version);
        }
        note(w, "", ATOMIC_CHANGED_DIR);
        r = open_dir_beneath(w->dfd, version, w->mnt_id, &vfd);
        if (r < 0) {
                r = fail(w, r, "cannot open the new directory %s", version);
                goto undo;
        }
        for (size_t i = 0; i < n; i++) {
                r = write_entry(w, vfd, version, &e[i]);
                if (r < 0) {
                        r = fail(w, r, "cannot write %s/%s", version, e[i].path);
                        goto undo;
                }
        }
        /* 0755 whatever the umask, as kubelet: group and others traverse it. */
        r = set_owner_mode(w, vfd, ATOMIC_UID_NONE, dir_mode(w));
        if (r >= 0 && w->o->sync && (fsync(vfd) < 0 || fsync(w->dfd) < 0))
                r = -errno;
        if (r < 0) {
                r = fail(w, r, "cannot set the owner and mode of %s", version);
                goto undo;
        }
        log_fields(LOG_DEBUG, w->o->log, "Atomic write into %s: wrote %zu files into %s", where(w), n,
                   version);
        *ret = TAKE_PTR(version);
        return 0;
undo:
        (void) remove_tree(w, w->dfd, version, version, 1);
        return r;
}

/* ---- the user-visible names ------------------------------------------------- */

static bool is_our_link(int dfd, const char *name) {
        char buf[ATOMIC_MAX_NAME + sizeof DATA_LINK_PREFIX + 1];
        ssize_t k = readlinkat(dfd, name, buf, sizeof buf - 1);

        if (k < 0)
                return false;
        buf[k] = '\0';
        return strncmp(buf, DATA_LINK_PREFIX, strlen(DATA_LINK_PREFIX)) == 0 &&
               streq(buf + strlen(DATA_LINK_PREFIX), name);
}

/* Before anything is written: a top-level name that is a file, a directory
 * or a mount not made by the writer is the user's, never replaced. */
static int check_visible(Writer *w, const Entry *e, size_t n) {
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *top = strndup(e[i].path, top_len(e[i].path));
                struct stat st;

                if (!top)
                        return -ENOMEM;
                if (i > 0 && strncmp(e[i - 1].path, top, strlen(top)) == 0 &&
                    top_len(e[i - 1].path) == strlen(top))
                        continue;
                if (fstatat(w->dfd, top, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno == ENOENT)
                                continue;
                        return fail(w, -errno, "cannot look at %s", top);
                }
                if (!S_ISLNK(st.st_mode))
                        return fail(w, -EEXIST,
                                    "%s/%s exists and is not a symlink the writer made: not replaced; "
                                    "remove it or "
                                    "change the key's path",
                                    where(w), top);
        }
        return 0;
}

static int make_visible(Writer *w, const Entry *e, size_t n) {
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *top = strndup(e[i].path, top_len(e[i].path)), *target = NULL;
                struct stat st;
                bool replace = false;

                if (!top)
                        return -ENOMEM;
                if (fstatat(w->dfd, top, &st, AT_SYMLINK_NOFOLLOW) >= 0) {
                        if (!S_ISLNK(st.st_mode))
                                return fail(w, -EEXIST,
                                            "%s/%s appeared meanwhile and is not a symlink the writer made",
                                            where(w), top);
                        if (is_our_link(w->dfd, top))
                                continue;
                        replace = true;
                } else if (errno != ENOENT)
                        return fail(w, -errno, "cannot look at %s", top);
                if (asprintf(&target, DATA_LINK_PREFIX "%s", top) < 0)
                        return -ENOMEM;
                if (symlinkat(target, w->dfd, replace ? LINK_TMP : top) < 0)
                        return fail(w, -errno, "cannot create the symlink %s", top);
                if (w->o->has_fs_group && fchownat(w->dfd, replace ? LINK_TMP : top, ATOMIC_UID_NONE,
                                                   w->o->fs_group, AT_SYMLINK_NOFOLLOW) < 0)
                        return fail(w, -errno, "cannot set the group of the symlink %s", top);
                if (replace && renameat(w->dfd, LINK_TMP, w->dfd, top) < 0)
                        return fail(w, -errno, "cannot replace the symlink %s", top);
                note(w, "", ATOMIC_CHANGED_DIR);
                w->changed = true;
                log_fields(LOG_DEBUG, w->o->log, "Atomic write into %s: %s %s -> %s", where(w),
                           replace ? "replaced a foreign symlink with" : "created", top, target);
        }
        return 0;
}

/* Symlinks of names no longer in the payload: only "<name> -> ..data/<name>". */
static int remove_stale_visible(Writer *w, const Entry *e, size_t n) {
        char **names = NULL;
        size_t k = 0;
        int r;

        r = list_dir(w->dfd, &names, &k);
        if (r < 0)
                return fail(w, r, "cannot list the volume directory");
        for (size_t i = 0; i < k && r >= 0; i++) {
                bool wanted = false;
                size_t len = strlen(names[i]);

                if (names[i][0] == '.' && names[i][1] == '.')
                        continue;
                for (size_t j = 0; j < n && !wanted; j++)
                        wanted = top_len(e[j].path) == len && strncmp(e[j].path, names[i], len) == 0;
                if (wanted || !is_our_link(w->dfd, names[i]))
                        continue;
                if (unlinkat(w->dfd, names[i], 0) < 0 && errno != ENOENT) {
                        r = fail(w, -errno, "cannot remove the symlink %s of a removed key", names[i]);
                        break;
                }
                note(w, "", ATOMIC_CHANGED_DIR);
                w->changed = true;
                log_fields(LOG_DEBUG, w->o->log,
                           "Atomic write into %s: removed %s, no longer in the payload", where(w), names[i]);
        }
        names_free(names, k);
        return r;
}

/* ---- the write ------------------------------------------------------------ */

/* The volume directory itself gets the fsGroup as in kubelet's walk. */
static int own_volume_dir(Writer *w) {
        struct stat st;

        if (!w->o->has_fs_group)
                return 0;
        if (fstat(w->dfd, &st) < 0)
                return -errno;
        if (st.st_gid == w->o->fs_group && (st.st_mode & FSGROUP_DIR_BITS) == FSGROUP_DIR_BITS)
                return 0;
        if (fchown(w->dfd, ATOMIC_UID_NONE, w->o->fs_group) < 0 ||
            fchmod(w->dfd, (st.st_mode & 07777) | FSGROUP_DIR_BITS) < 0)
                return fail(w, -errno, "cannot give the volume directory the group %u",
                            (unsigned) w->o->fs_group);
        note(w, "", ATOMIC_CHANGED_DIR);
        return 0;
}

static int swap(Writer *w, const char *version) {
        if (unlinkat(w->dfd, ATOMIC_DATA_TMP, 0) < 0 && errno != ENOENT)
                return fail(w, -errno, "cannot remove the leftover " ATOMIC_DATA_TMP);
        if (symlinkat(version, w->dfd, ATOMIC_DATA_TMP) < 0)
                return fail(w, -errno, "cannot create the symlink " ATOMIC_DATA_TMP);
        note(w, "", ATOMIC_CHANGED_DIR);
        if (w->o->has_fs_group &&
            fchownat(w->dfd, ATOMIC_DATA_TMP, ATOMIC_UID_NONE, w->o->fs_group, AT_SYMLINK_NOFOLLOW) < 0)
                return fail(w, -errno, "cannot set the group of " ATOMIC_DATA_TMP);
        if (renameat(w->dfd, ATOMIC_DATA_TMP, w->dfd, ATOMIC_DATA_DIR) < 0)
                return fail(w, -errno, "cannot rename " ATOMIC_DATA_TMP " over " ATOMIC_DATA_DIR);
        note(w, "", ATOMIC_CHANGED_DIR);
        if (w->o->sync && fsync(w->dfd) < 0)
                return fail(w, -errno, "cannot make the swap durable");
        return 0;
}

int atomic_write(int dir_fd, const AtomicPayload *payload, const AtomicWriteOptions *opts, bool *ret_changed,
                 char **ret_reason) {
        static const AtomicWriteOptions defaults = {};
        _cleanup_free_ char *old = NULL, *version = NULL;
        _cleanup_close_ int dfd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        Writer w = { .dfd = dfd, .o = opts ? opts : &defaults };
        Entry *e = NULL;
        size_t n = 0;
        bool same = false;
        int r, leftovers = 0;

        if (ret_changed)
                *ret_changed = false;
        if (ret_reason)
                *ret_reason = NULL;
        if (dfd < 0) {
                r = fail(&w, -errno, "cannot open the volume directory");
                goto finish;
        }
        r = mount_id(dfd, "", &w.mnt_id);
        if (r < 0) {
                r = fail(&w, r, "cannot identify the volume directory's mount");
                goto finish;
        }
        r = build_entries(&w, payload, &e, &n);
        if (r < 0)
                goto finish;
        r = current_version(dfd, &old);
        if (r == -EINVAL) {
                r = fail(&w, -EEXIST,
                         "%s/" ATOMIC_DATA_DIR " is not a symlink: not the writer's, left alone; remove it",
                         where(&w));
                goto finish;
        }
        if (r < 0) {
                r = fail(&w, r, "cannot read " ATOMIC_DATA_DIR);
                goto finish;
        }
        r = check_visible(&w, e, n);
        if (r < 0)
                goto finish;
        if (old)
                same = version_equal(&w, old, e, n);
        /* A leftover that cannot go (a mount inside it) does not hold the
         * update back: its error is returned once the new version is in. */
        leftovers = remove_leftovers(&w, old);
        r = own_volume_dir(&w);
        if (r < 0)
                goto finish;
        if (!same) {
                r = write_version(&w, e, n, &version);
                if (r < 0)
                        goto finish;
        }
        /* New names before the swap: they resolve once "..data" has them. */
        r = make_visible(&w, e, n);
        if (r >= 0 && version)
                r = swap(&w, version);
        if (r < 0) {
                if (version)
                        (void) remove_tree(&w, dfd, version, version, 1);
                goto finish;
        }
        if (version) {
                w.changed = true;
                log_fields(LOG_DEBUG, w.o->log, "Atomic write into %s: " ATOMIC_DATA_DIR " -> %s (was %s)",
                           where(&w), version, strempty(old));
        } else
                log_fields(LOG_DEBUG, w.o->log, "Atomic write into %s: %s unchanged, nothing written",
                           where(&w), old);
        r = remove_stale_visible(&w, e, n);
        if (r >= 0 && version && old) {
                r = remove_tree(&w, dfd, old, old, 1);
                if (r < 0)
                        r = fail(&w, r, "cannot remove the previous version %s (the new one is in place)",
                                 old);
        }
        if (r >= 0 && leftovers < 0)
                r = leftovers;
finish:
        entries_free(e, n);
        if (ret_changed)
                *ret_changed = w.changed;
        if (ret_reason && r < 0)
                *ret_reason = TAKE_PTR(w.reason);
        free(w.reason);
        return r;
}

int atomic_clear(int dir_fd, const AtomicWriteOptions *opts, char **ret_reason) {
        static const AtomicWriteOptions defaults = {};
        _cleanup_close_ int dfd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        Writer w = { .dfd = dfd, .o = opts ? opts : &defaults };
        struct stat st;
        int r;

        if (ret_reason)
                *ret_reason = NULL;
        if (dfd < 0)
                r = fail(&w, -errno, "cannot open the volume directory");
        else if ((r = mount_id(dfd, "", &w.mnt_id)) < 0)
                r = fail(&w, r, "cannot identify the volume directory's mount");
        /* The names first, then what they point to: a reader meets a whole
         * version or nothing. */
        if (r >= 0)
                r = remove_stale_visible(&w, NULL, 0);
        if (r >= 0 && fstatat(dfd, ATOMIC_DATA_DIR, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISLNK(st.st_mode)) {
                if (unlinkat(dfd, ATOMIC_DATA_DIR, 0) < 0 && errno != ENOENT)
                        r = fail(&w, -errno, "cannot remove " ATOMIC_DATA_DIR);
                else
                        note(&w, "", ATOMIC_CHANGED_DIR);
        }
        if (r >= 0)
                r = remove_leftovers(&w, NULL);
        if (r >= 0)
                log_fields(LOG_DEBUG, w.o->log, "Atomic write into %s: cleared", where(&w));
        if (ret_reason && r < 0)
                *ret_reason = TAKE_PTR(w.reason);
        free(w.reason);
        return r;
}
