/* SPDX-License-Identifier: Apache-2.0 */
/* One kvolumed per root-dir (volume/host/rootlock.h).  Two would both publish and
 * unpublish every volume (two NodePublishVolume for one pod at the same
 * millisecond).  Neither lock leaves anything of ours in kubelet's tree: the
 * directory's is an flock() of the directory itself, the path's a file under
 * /run.  The kernel drops both when the process goes, however it goes.  The
 * lock files stay, empty (an flock needs no content: the holder's PID is
 * read from /proc/locks), and are never removed: removing a lock file that
 * another process may have opened and be about to lock is how two processes
 * come to hold "the" lock. */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "systemd/log.h"
#include "volume/host/rootlock.h"

/* The lock of one spelling of root-dir's path. */
typedef struct PathLock {
        char *name;        /* under lock_dir */
        char *path;        /* lock_dir/name */
        int fd;            /* flock()ed */
        dev_t dev;
        ino_t ino;
} PathLock;

struct RootLock {
        char *configured;
        char *path;        /* resolved at start */
        int fd;            /* the directory, flock()ed */
        dev_t dev;
        ino_t ino;
        char *lock_dir;
        /* The resolved path's and, when it differs, the configured one's:
         * a kvolumed on the same spelling whose symlink led elsewhere
         * meanwhile is kept out too. */
        PathLock locks[2];
        size_t n_locks;
};

/* The PID holding an flock() on the inode, from /proc/locks ("1: FLOCK
 * ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF", major and minor in
 * hex); 0 when not found.  A file system whose stat() device differs from
 * its superblock's (btrfs subvolumes) is matched on the inode alone. */
static pid_t flock_holder(const struct stat *st) {
        _cleanup_(fclosep) FILE *f = fopen("/proc/locks", "re");
        char line[256];
        pid_t by_inode = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof line, f)) {
                unsigned maj, min;
                unsigned long long ino;
                int pid;
                char type[16];

                if (strstr(line, "->")) /* a waiter, not the holder */
                        continue;
                if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", type, &pid, &maj, &min, &ino) != 5 ||
                    !streq(type, "FLOCK") || ino != (unsigned long long) st->st_ino || pid <= 0)
                        continue;
                if (maj == major(st->st_dev) && min == minor(st->st_dev))
                        return pid;
                by_inode = by_inode ?: pid;
        }
        return by_inode;
}

/* ---- the lock file's name --------------------------------------------------- */

static bool keep_char(char c, bool first) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c == ':' || (c == '.' && !first);
}

static int hashed_name(const char *resolved, char **ret) {
        static const char hex[] = "0123456789abcdef";
        unsigned char digest[32];
        unsigned len = 0;
        char *name;

        if (EVP_Digest(resolved, strlen(resolved), digest, &len, EVP_sha256(), NULL) != 1 || len != sizeof digest)
                return -EIO;
        name = malloc(sizeof "sha256-" - 1 + 2 * sizeof digest + sizeof ".lock");
        if (!name)
                return -ENOMEM;
        strcpy(name, "sha256-");
        for (unsigned i = 0; i < sizeof digest; i++) {
                name[7 + 2 * i] = hex[digest[i] >> 4];
                name[8 + 2 * i] = hex[digest[i] & 15];
        }
        strcpy(name + 7 + 2 * sizeof digest, ".lock");
        *ret = name;
        return 0;
}

/* systemd-escape --path: "/" between components becomes "-", and every
 * character but [A-Za-z0-9:_.] (a leading "." too) "\xNN", so that two paths
 * never share a name ("-" itself is "\x2d"). */
int root_lock_file_name(const char *resolved, char **ret) {
        _cleanup_free_ char *name = NULL;
        const char *p;
        size_t n = 0;

        if (isempty(resolved) || resolved[0] != '/')
                return -EINVAL;
        for (p = resolved; *p == '/'; p++)
                ;
        name = malloc(4 * strlen(p) + sizeof ".lock");
        if (!name)
                return -ENOMEM;
        for (; *p; p++) {
                if (*p == '/') {
                        if (p[1] != '/' && p[1] != '\0')
                                name[n++] = '-';
                } else if (keep_char(*p, n == 0))
                        name[n++] = *p;
                else
                        n += (size_t) sprintf(name + n, "\\x%02x", (unsigned) (unsigned char) *p);
        }
        if (n == 0)
                return -EINVAL; /* "/": refused by the configuration already */
        if (n + strlen(".lock") > NAME_MAX)
                return hashed_name(resolved, ret);
        strcpy(name + n, ".lock");
        *ret = TAKE_PTR(name);
        return 0;
}

/* ---- taking the locks ------------------------------------------------------- */

/* lock_dir and its missing parents (0755, as /run's), itself 0700; an
 * existing one must be ours and writable by no one else. */
static int lock_dir_open(const char *dir, int *ret_fd) {
        _cleanup_free_ char *copy = strdup(dir);
        _cleanup_close_ int fd = -1;
        struct stat st;

        if (!copy)
                return -ENOMEM;
        for (char *slash = strchr(copy + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
                *slash = '\0';
                if (mkdir(copy, 0755) >= 0)
                        (void) chmod(copy, 0755); /* whatever the umask */
                else if (errno != EEXIST)
                        return log_error_errno(errno, "Failed to create %s for the root-dir lock: %m", copy);
                *slash = '/';
        }
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return log_error_errno(errno, "Failed to create %s for the root-dir lock: %m", dir);
        fd = open(dir, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(errno, "Failed to open %s for the root-dir lock: %m", dir);
        if (fstat(fd, &st) < 0)
                return log_error_errno(errno, "Failed to stat %s: %m", dir);
        if (st.st_uid != geteuid() || (st.st_mode & 0022))
                return log_error_errno(EPERM, "%s is not a directory of root's that only root can write (owner %u, "
                                       "mode %04o): whoever can write there can hold kvolumed's root-dir lock; "
                                       "remove it, kvolumed makes it again",
                                       dir, (unsigned) st.st_uid, (unsigned) (st.st_mode & 07777));
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Opens (creating it 0600) and locks lock_dir/name.  -EBUSY with the
 * holder's PID (0: unknown) when another process holds it; not logged. */
static int lock_file_take(const char *lock_dir, const char *name, int *ret_fd, struct stat *ret_st,
                          pid_t *ret_holder) {
        _cleanup_close_ int dir_fd = -1, fd = -1;
        struct stat st;
        int r;

        r = lock_dir_open(lock_dir, &dir_fd);
        if (r < 0)
                return r;
        fd = openat(dir_fd, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return log_error_errno(errno, "Failed to open the root-dir lock %s/%s: %m", lock_dir, name);
        if (fstat(fd, &st) < 0)
                return log_error_errno(errno, "Failed to stat the root-dir lock %s/%s: %m", lock_dir, name);
        if (!S_ISREG(st.st_mode))
                return log_error_errno(EEXIST, "The root-dir lock %s/%s is not a regular file; remove it", lock_dir,
                                       name);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK)
                        return log_error_errno(errno, "Failed to lock %s/%s: %m", lock_dir, name);
                *ret_holder = flock_holder(&st);
                return -EBUSY;
        }
        *ret_st = st;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* lock_path: the path lock another process holds; NULL: the directory's. */
static void log_busy(const RootLock *l, pid_t holder, const char *lock_path, const struct stat *dir_st) {
        _cleanup_free_ char *spelt = NULL;
        const char *what = l->path;

        if (!streq(l->configured, l->path) && asprintf(&spelt, "%s (%s)", l->configured, l->path) >= 0)
                what = spelt;
        if (holder <= 0) {
                log_error("root-dir %s is locked by another process (%s): one kvolumed per root-dir; not starting",
                          what, lock_path ?: "an flock() of the directory");
                return;
        }
        /* The other one holds the path, not this directory: it locked what was
         * there before something was mounted over it or made in its place. */
        if (lock_path && flock_holder(dir_st) != holder)
                log_error("root-dir %s is in use by another kvolumed (PID %d): one kvolumed per root-dir; not "
                          "starting.  The directory at %s now is not the one that kvolumed locked at its start "
                          "(a file system was mounted over it, or it was renamed and made again): that kvolumed "
                          "has stopped acting on volumes until %s is its directory again",
                          what, (int) holder, l->path, l->path);
        else
                log_error("root-dir %s is in use by another kvolumed (PID %d): one kvolumed per root-dir; not "
                          "starting",
                          what, (int) holder);
}

int root_lock_take(const char *path, const char *lock_dir, RootLock **ret) {
        _cleanup_(root_lock_freep) RootLock *l = NULL;
        struct stat st, resolved_st, lock_st;
        pid_t holder = 0;
        int r;

        if (isempty(path) || path[0] != '/' || isempty(lock_dir) || lock_dir[0] != '/')
                return -EINVAL;
        l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->fd = l->locks[0].fd = l->locks[1].fd = -1;
        l->configured = strdup(path);
        l->lock_dir = strdup(lock_dir);
        if (!l->configured || !l->lock_dir)
                return -ENOMEM;
        if (mkdir(path, 0750) < 0 && errno != EEXIST)
                return log_error_errno(errno, "Failed to create root-dir %s: %m", path);
        /* O_CLOEXEC: nothing exec'ed keeps it; the fsGroup walk's forked
         * child closes it itself (volume/host/fsgroup.c). */
        l->fd = open(path, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (l->fd < 0)
                return log_error_errno(errno, "Failed to open root-dir %s: %m", path);
        if (fstat(l->fd, &st) < 0)
                return log_error_errno(errno, "Failed to stat root-dir %s: %m", path);
        l->dev = st.st_dev;
        l->ino = st.st_ino;

        l->path = realpath(path, NULL);
        if (!l->path)
                return log_error_errno(errno, "Failed to resolve root-dir %s: %m", path);
        if (stat(l->path, &resolved_st) < 0 || resolved_st.st_dev != st.st_dev || resolved_st.st_ino != st.st_ino)
                return log_error_errno(EAGAIN, "root-dir %s changed while kvolumed started (resolved to %s); "
                                       "not starting", path, l->path);
        if (!streq(l->path, path))
                log_info("root-dir %s is %s with its symlinks resolved: kvolumed uses %s, the path the kernel "
                         "names its mounts by, in every path it compares with the mount table or gives a driver "
                         "or the runtime; should %s resolve to anything else later, kvolumed stops acting on "
                         "volumes until it resolves to %s again",
                         path, l->path, l->path, path, l->path);

        /* The paths first: a kvolumed that runs on one, whatever directory
         * is there now, is the one to name. */
        const char *spellings[ELEMENTSOF(l->locks)] = { l->path, streq(path, l->path) ? NULL : path };
        for (size_t i = 0; i < ELEMENTSOF(spellings) && spellings[i]; i++) {
                const char *spelling = spellings[i];
                PathLock *k = &l->locks[l->n_locks];

                r = root_lock_file_name(spelling, &k->name);
                if (r < 0)
                        return log_error_errno(r, "Failed to name the lock of root-dir %s: %m", spelling);
                /* "/var/lib/kubelet/" is spelt as its resolution is: one lock
                 * (a second flock of it, by another descriptor, would fail). */
                if (i > 0 && streq(k->name, l->locks[0].name)) {
                        k->name = mfree_str(k->name);
                        break;
                }
                if (asprintf(&k->path, "%s/%s", lock_dir, k->name) < 0)
                        return -ENOMEM;
                l->n_locks++;
                r = lock_file_take(lock_dir, k->name, &k->fd, &lock_st, &holder);
                if (r == -EBUSY) {
                        log_busy(l, holder, k->path, &st);
                        return r;
                }
                if (r < 0)
                        return r;
                k->dev = lock_st.st_dev;
                k->ino = lock_st.st_ino;
        }
        if (flock(l->fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK)
                        return log_error_errno(errno, "Failed to lock root-dir %s: %m", path);
                log_busy(l, flock_holder(&st), NULL, &st);
                return -EBUSY;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

RootLock *root_lock_free(RootLock *l) {
        if (!l)
                return NULL;
        if (l->fd >= 0)
                (void) close(l->fd);
        for (size_t i = 0; i < ELEMENTSOF(l->locks); i++) {
                if (l->locks[i].fd >= 0)
                        (void) close(l->locks[i].fd);
                free(l->locks[i].name);
                free(l->locks[i].path);
        }
        free(l->configured);
        free(l->path);
        free(l->lock_dir);
        free(l);
        return NULL;
}

const char *root_lock_path(const RootLock *l) {
        return l->path;
}

const char *root_lock_configured(const RootLock *l) {
        return l->configured;
}

int root_lock_fd(const RootLock *l) {
        return l->fd;
}

/* ---- checking ---------------------------------------------------------------- */

static int why(char **ret, int error, const char *format, ...) _printf_(3, 4);
static int why(char **ret, int error, const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        if (vasprintf(ret, format, ap) < 0)
                *ret = NULL;
        va_end(ap);
        return error;
}

/* The lock file removed (a cleanup of /run) or replaced: taken again,
 * unless another process took the new one meanwhile. */
static int lock_file_check(RootLock *l, PathLock *k, char **ret_why) {
        struct statx sx;
        struct stat st;
        pid_t holder = 0;
        int fd = -1, r;

        if (statx(AT_FDCWD, k->path, AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_INO, &sx) >= 0 &&
            makedev(sx.stx_dev_major, sx.stx_dev_minor) == k->dev && sx.stx_ino == (uint64_t) k->ino)
                return 0;
        r = lock_file_take(l->lock_dir, k->name, &fd, &st, &holder);
        if (r == -EBUSY)
                return why(ret_why, r, "the lock file %s of root-dir %s was removed, and another process (PID %d) "
                           "holds the new one: another kvolumed may run on %s", k->path, l->configured,
                           (int) holder, l->configured);
        if (r < 0)
                return why(ret_why, r, "the lock file %s of root-dir %s was removed and cannot be made again: %s",
                           k->path, l->configured, strerror(-r));
        (void) close(k->fd);
        k->fd = fd;
        k->dev = st.st_dev;
        k->ino = st.st_ino;
        log_warning("The lock file %s of root-dir %s was removed (a cleanup of %s?); kvolumed took it again",
                    k->path, l->configured, l->lock_dir);
        return 0;
}

int root_lock_check(RootLock *l, char **ret_why) {
        _cleanup_free_ char *now = NULL;
        struct statx sx;
        dev_t dev;

        *ret_why = NULL;
        now = realpath(l->configured, NULL);
        if (!now)
                return why(ret_why, -errno, "root-dir %s cannot be resolved any more (%m): it was removed or "
                           "renamed, or something was mounted above it", l->configured);
        if (!streq(now, l->path))
                return why(ret_why, -EXDEV, "root-dir %s resolves to %s now, not to %s as when kvolumed started: "
                           "a symlink in its path changed", l->configured, now, l->path);
        /* Cached attributes only: no round trip to whatever is mounted there. */
        if (statx(AT_FDCWD, l->path, AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_INO, &sx) < 0)
                return why(ret_why, -errno, "root-dir %s cannot be looked at any more: %m", l->path);
        dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
        if (dev != l->dev)
                return why(ret_why, -EXDEV, "root-dir %s is another file system's directory now (device %u:%u, "
                           "kvolumed locked one on %u:%u): a file system was mounted on it or above it",
                           l->path, major(dev), minor(dev), major(l->dev), minor(l->dev));
        if (sx.stx_ino != (uint64_t) l->ino)
                return why(ret_why, -ESTALE, "root-dir %s is another directory now (inode %llu, kvolumed locked "
                           "inode %llu): it was renamed or removed and made again, or another directory was "
                           "mounted on it", l->path, (unsigned long long) sx.stx_ino,
                           (unsigned long long) l->ino);
        for (size_t i = 0; i < l->n_locks; i++) {
                int r = lock_file_check(l, &l->locks[i], ret_why);
                if (r < 0)
                        return r;
        }
        return 0;
}
