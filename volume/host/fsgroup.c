/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "systemd/log.h"
#include "systemd/testhook.h"
#include "volume/host/fsgroup.h"

#define RW_MASK 0660
#define EXEC_MASK 0110
/* Directory descriptors the walk keeps open at most, whatever the depth:
 * deeper ancestors are closed and opened again, down from the nearest one
 * still open, when their other subdirectories come. */
#define MAX_OPEN_DIRS 16
/* The child tells the parent it is alive once per directory and once per
 * this many entries: a byte on a pipe, cheap beside the chown. */
#define PROGRESS_EVERY 64

/* Where the child reports progress (-1: nowhere, as in the tests). */
typedef struct Walker {
        gid_t gid;
        dev_t dev;
        uint64_t mnt_id; /* the volume's mount: a bind mount inside it is not walked */
        bool has_mnt_id;
        int progress_fd;
        unsigned entries;
} Walker;

/* What the walk needs of an entry, from the descriptor opened. */
typedef struct Entry {
        mode_t mode;
        gid_t gid;
        dev_t dev;
        ino_t ino;
        uint64_t mnt_id;
        bool has_mnt_id;
} Entry;

static void progress(Walker *w) {
        /* Non-blocking: a full pipe already says "alive". */
        if (w->progress_fd >= 0)
                (void) !write(w->progress_fd, "", 1);
}

static int examine(int fd, Entry *ret) {
        struct statx sx;

        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW,
                  STATX_TYPE | STATX_MODE | STATX_GID | STATX_INO | STATX_MNT_ID, &sx) < 0)
                return -errno;
        *ret = (Entry){ .mode = sx.stx_mode,
                        .gid = sx.stx_gid,
                        .dev = makedev(sx.stx_dev_major, sx.stx_dev_minor),
                        .ino = sx.stx_ino,
                        .mnt_id = sx.stx_mnt_id,
                        .has_mnt_id = sx.stx_mask & STATX_MNT_ID };
        return 0;
}

/* The volume belongs to a pod: its files can be swapped for symlinks while
 * we walk.  So nothing is ever changed by name after a check: each entry is
 * opened once (O_PATH|O_NOFOLLOW, relative to its directory's descriptor),
 * examined, and changed through that descriptor; a symlink only ever has
 * its own group changed (kubelet's CVE-2017-1002101 is the same race
 * through a path name).  A directory is later opened by name, O_NOFOLLOW,
 * from its parent's descriptor, and walked only if it is the inode that
 * was examined. */
static int fix_opened(int fd, const Entry *e, gid_t gid) {
        char proc[64];
        mode_t mask = RW_MASK;

        if (fchownat(fd, "", (uid_t) -1, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISLNK(e->mode))
                return 0;
        if (S_ISDIR(e->mode))
                mask |= EXEC_MASK | S_ISGID;
        if ((e->mode & mask) == mask)
                return 0;
        /* fchmod() refuses O_PATH descriptors; the magic link names exactly
         * the inode opened, whatever its name points to now. */
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        return chmod(proc, (e->mode & 07777) | mask) < 0 ? -errno : 0;
}

/* One directory on the way down from the volume's root.  The walk keeps
 * these on the heap, not the stack, so a tree of any depth is walked; only
 * MAX_OPEN_DIRS of them keep a descriptor.  Nothing ever goes up through
 * "..": a pod could move a directory away mid-walk and make ".." lead out
 * of its volume. */
typedef struct Frame {
        char *name; /* in the parent; NULL for the root */
        dev_t dev;
        ino_t ino;
        int fd;             /* -1: closed to bound the descriptors */
        char **subdirs;     /* its subdirectories still to walk, read at once */
        ino_t *subdir_inos; /* all on the volume's st_dev */
        size_t n_subdirs, next;
} Frame;

typedef struct Stack {
        Frame *frames;
        size_t n, allocated;
        size_t n_open;
} Stack;

static void frame_done(Stack *k, Frame *f) {
        if (f->fd >= 0) {
                close(f->fd);
                k->n_open--;
        }
        for (size_t i = 0; i < f->n_subdirs; i++)
                free(f->subdirs[i]);
        free(f->subdirs);
        free(f->subdir_inos);
        free(f->name);
}

/* Closes the shallowest descriptor but the root's while too many are open. */
static void bound_open(Stack *k) {
        for (size_t i = 1; k->n_open > MAX_OPEN_DIRS && i + 1 < k->n; i++)
                if (k->frames[i].fd >= 0) {
                        close(k->frames[i].fd);
                        k->frames[i].fd = -1;
                        k->n_open--;
                }
}

/* Opens name below parent_fd as the directory examined before, or -ESTALE
 * when something else is there now (moved, replaced: not walked). */
static int open_subdir(int parent_fd, const char *name, dev_t dev, ino_t ino) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? -ESTALE : -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (st.st_dev != dev || st.st_ino != ino)
                return -ESTALE;
        return TAKE_FD(fd);
}

/* A descriptor for frame i: its own, or opened again down from the nearest
 * ancestor that has one (the root always has). */
static int frame_fd(Stack *k, size_t i) {
        size_t j = i;
        int fd = -1;

        while (k->frames[j].fd < 0)
                j--;
        for (size_t l = j + 1; l <= i; l++) {
                int parent = fd >= 0 ? fd : k->frames[j].fd;
                int next = open_subdir(parent, k->frames[l].name, k->frames[l].dev, k->frames[l].ino);
                if (fd >= 0)
                        close(fd);
                if (next < 0)
                        return next;
                fd = next;
        }
        if (fd >= 0) {
                k->frames[i].fd = fd;
                k->n_open++;
                bound_open(k);
        }
        return k->frames[i].fd;
}

/* Changes every entry of the directory open in f, and notes its
 * subdirectories (on the volume's mount) to walk next. */
static int read_dir(Walker *w, Frame *f) {
        size_t allocated = 0;
        struct dirent *de;
        DIR *d;
        int list_fd, r = 0;

        list_fd = openat(f->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (list_fd < 0)
                return -errno;
        d = fdopendir(list_fd);
        if (!d) {
                close(list_fd);
                return -errno;
        }
        progress(w);
        while (r >= 0 && (de = readdir(d))) {
                _cleanup_close_ int fd = -1;
                Entry e;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                fd = openat(f->fd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        if (errno == ENOENT)
                                continue; /* removed meanwhile */
                        r = -errno;
                        break;
                }
                r = examine(fd, &e);
                if (r < 0)
                        break;
                /* Another file system mounted inside, or a bind mount (of the
                 * volume's own tree, maybe: a loop): not the volume. */
                if (e.dev != w->dev || (w->has_mnt_id && e.has_mnt_id && e.mnt_id != w->mnt_id))
                        continue;
                r = fix_opened(fd, &e, w->gid);
                if (++w->entries % PROGRESS_EVERY == 0)
                        progress(w);
                if (r < 0 || !S_ISDIR(e.mode))
                        continue;
                if (f->n_subdirs == allocated) {
                        size_t n = allocated ? allocated * 2 : 8;
                        char **names = reallocarray(f->subdirs, n, sizeof *names);
                        if (names)
                                f->subdirs = names;
                        ino_t *inos = names ? reallocarray(f->subdir_inos, n, sizeof *inos) : NULL;
                        if (!inos) {
                                r = -ENOMEM;
                                break;
                        }
                        f->subdir_inos = inos;
                        allocated = n;
                }
                f->subdirs[f->n_subdirs] = strdup(de->d_name);
                if (!f->subdirs[f->n_subdirs]) {
                        r = -ENOMEM;
                        break;
                }
                f->subdir_inos[f->n_subdirs++] = e.ino;
        }
        closedir(d);
        return r;
}

/* Without MNT_ID (kernels before 5.8), a bind mount of the volume's own
 * tree inside it is found as an ancestor met again. */
static bool is_ancestor(const Stack *k, ino_t ino) {
        for (size_t i = 0; i < k->n; i++)
                if (k->frames[i].ino == ino)
                        return true;
        return false;
}

/* Depth first, iteratively: memory grows with the depth, descriptors do
 * not (MAX_OPEN_DIRS and those of one directory being read). */
static int walk(Walker *w, int root_fd, const Entry *root) {
        Stack k = {};
        int r;

        k.frames = calloc(8, sizeof *k.frames);
        if (!k.frames)
                return -ENOMEM;
        k.allocated = 8;
        r = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
        if (r < 0) {
                free(k.frames);
                return -errno;
        }
        k.frames[0] = (Frame){ .dev = root->dev, .ino = root->ino, .fd = r };
        k.n = k.n_open = 1;
        r = read_dir(w, &k.frames[0]);

        while (r >= 0 && k.n > 0) {
                Frame *top = &k.frames[k.n - 1];
                const char *name;
                ino_t ino;
                int parent, fd;

                if (top->next == top->n_subdirs) {
                        frame_done(&k, top);
                        k.n--;
                        continue;
                }
                name = top->subdirs[top->next];
                ino = top->subdir_inos[top->next++];
                if (!w->has_mnt_id && is_ancestor(&k, ino))
                        continue;
                parent = frame_fd(&k, k.n - 1);
                if (parent == -ESTALE) { /* moved away meanwhile: its subtree with it */
                        top->next = top->n_subdirs;
                        continue;
                }
                if (parent < 0) {
                        r = parent;
                        break;
                }
                fd = open_subdir(parent, name, w->dev, ino);
                if (fd == -ESTALE)
                        continue;
                if (fd < 0) {
                        r = fd;
                        break;
                }
                if (k.n == k.allocated) {
                        Frame *frames = reallocarray(k.frames, k.allocated * 2, sizeof *frames);
                        if (!frames) {
                                close(fd);
                                r = -ENOMEM;
                                break;
                        }
                        k.frames = frames;
                        k.allocated *= 2;
                }
                k.frames[k.n] = (Frame){ .name = strdup(name), .dev = w->dev, .ino = ino, .fd = fd };
                k.n++;
                k.n_open++;
                if (!k.frames[k.n - 1].name) {
                        r = -ENOMEM;
                        break;
                }
                bound_open(&k);
                r = read_dir(w, &k.frames[k.n - 1]);
        }
        while (k.n > 0)
                frame_done(&k, &k.frames[--k.n]);
        free(k.frames);
        return r;
}

static int apply(const char *path, gid_t gid, bool on_root_mismatch, int progress_fd) {
        Walker w = { .gid = gid, .progress_fd = progress_fd };
        _cleanup_close_ int fd = -1;
        Entry root;
        int r;

        fd = open(path, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = examine(fd, &root);
        if (r < 0)
                return r;
        if (on_root_mismatch && root.gid == gid &&
            (root.mode & (RW_MASK | EXEC_MASK | S_ISGID)) == (RW_MASK | EXEC_MASK | S_ISGID))
                return 0;
        r = fix_opened(fd, &root, gid);
        if (r < 0)
                return r;
        w.dev = root.dev;
        w.mnt_id = root.mnt_id;
        w.has_mnt_id = root.has_mnt_id;
        /* The walk reads directories: from an O_PATH descriptor it cannot. */
        _cleanup_close_ int dir_fd = open_subdir(fd, ".", root.dev, root.ino);
        if (dir_fd < 0)
                return dir_fd == -ESTALE ? -ENOENT : dir_fd;
        return walk(&w, dir_fd, &root);
}

int fsgroup_apply(const char *path, gid_t gid, bool on_root_mismatch) {
        return apply(path, gid, on_root_mismatch, -1);
}

struct FsGroupWalk {
        pid_t pid;
        sd_event_source *child_source;
        sd_event_source *progress_source; /* the pipe's read end */
        sd_event_source *stall_timer;
        uint64_t stall_usec;
        fsgroup_done_t done;
        void *userdata;
};

uint64_t fsgroup_stall_usec(void) {
        unsigned long ms = test_hook_ulong("FSGROUP_STALL_MS", 0);

        return ms > 0 ? (uint64_t) ms * USEC_PER_MSEC : FSGROUP_STALL_USEC;
}

/* A child nobody waits for any more: reaped by sd-event once it exits (the
 * loop owns the source, floating), then dropped. */
static int on_orphan_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        /* The loop's reference was the last: the source goes after this dispatch. */
        (void) sd_event_source_set_floating(s, false);
        return 0;
}

static void stop_child(FsGroupWalk *w) {
        w->progress_source = sd_event_source_disable_unref(w->progress_source);
        w->stall_timer = sd_event_source_disable_unref(w->stall_timer);
        if (w->pid <= 0)
                return;
        (void) kill(w->pid, SIGKILL);
        /* sd-event has no way to change a source's callback: a new one for
         * the same pid cannot be added while this one exists, so this one is
         * handed to the loop, and its callback sees no walk any more. */
        if (w->child_source) {
                (void) sd_event_source_set_userdata(w->child_source, NULL);
                if (sd_event_source_set_floating(w->child_source, true) >= 0)
                        w->child_source = sd_event_source_unref(w->child_source);
        }
        w->child_source = sd_event_source_disable_unref(w->child_source);
        w->pid = 0;
}

static int on_child_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        FsGroupWalk *w = userdata;

        if (!w)
                return on_orphan_exit(s, si, userdata);
        w->pid = 0;
        w->child_source = sd_event_source_disable_unref(w->child_source);
        w->progress_source = sd_event_source_disable_unref(w->progress_source);
        w->stall_timer = sd_event_source_disable_unref(w->stall_timer);
        w->done(w, si->si_code == CLD_EXITED && si->si_status == 0 ? 0 : -EIO, w->userdata);
        return 0;
}

static int on_progress(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        FsGroupWalk *w = userdata;
        char buf[256];
        ssize_t n;

        while ((n = read(fd, buf, sizeof buf)) > 0)
                ;
        if (n == 0) /* the child is gone: its exit comes through the child source */
                w->progress_source = sd_event_source_disable_unref(w->progress_source);
        (void) sd_event_source_set_time_relative(w->stall_timer, w->stall_usec);
        return 0;
}

static int on_stalled(sd_event_source *s, uint64_t usec, void *userdata) {
        FsGroupWalk *w = userdata;

        stop_child(w);
        w->done(w, -ETIMEDOUT, w->userdata);
        return 0;
}

FsGroupWalk *fsgroup_walk_free(FsGroupWalk *w) {
        if (!w)
                return NULL;
        stop_child(w);
        free(w);
        return NULL;
}

pid_t fsgroup_walk_pid(const FsGroupWalk *w) {
        return w ? w->pid : 0;
}

int fsgroup_walk_start(sd_event *event, const char *path, gid_t gid, bool on_root_mismatch,
                       fsgroup_done_t done, void *userdata, FsGroupWalk **ret) {
        _cleanup_close_ int read_fd = -1, write_fd = -1;
        FsGroupWalk *w;
        int pipe_fds[2], r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (FsGroupWalk){ .stall_usec = fsgroup_stall_usec(), .done = done, .userdata = userdata };
        if (pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) < 0) {
                free(w);
                return -errno;
        }
        read_fd = pipe_fds[0];
        write_fd = pipe_fds[1];
        w->pid = fork();
        if (w->pid < 0) {
                r = -errno;
                free(w);
                return r;
        }
        if (w->pid == 0) {
                /* The child touches nothing of the parent's loop or connections,
                 * and keeps none of its descriptors but the pipe: above all not
                 * root-dir's lock (volume/host/rootlock.c), which a child stuck in a
                 * dead file system would otherwise hold after kvolumed is gone. */
                (void) signal(SIGTERM, SIG_DFL);
                if (write_fd > 3)
                        (void) close_range(3, (unsigned) write_fd - 1, 0);
                (void) close_range((unsigned) write_fd + 1, ~0U, 0);
                /* The tests' stand-in for a walk stuck in a dead file
                 * system: stopped before its first step, whatever the load. */
                if (test_hook_getenv("FSGROUP_CHILD_STOPS"))
                        (void) raise(SIGSTOP);
                _exit(apply(path, gid, on_root_mismatch, write_fd) == 0 ? 0 : 1);
        }
        close(TAKE_FD(write_fd));
        r = sd_event_add_child(event, &w->child_source, w->pid, WEXITED, on_child_exit, w);
        if (r < 0) {
                (void) kill(w->pid, SIGKILL);
                (void) waitpid(w->pid, NULL, 0);
                free(w);
                return r;
        }
        r = sd_event_add_io(event, &w->progress_source, read_fd, EPOLLIN, on_progress, w);
        if (r >= 0) {
                (void) sd_event_source_set_io_fd_own(w->progress_source, true);
                TAKE_FD(read_fd);
                r = sd_event_add_time_relative(event, &w->stall_timer, CLOCK_MONOTONIC, w->stall_usec,
                                               USEC_PER_MSEC, on_stalled, w);
        }
        if (r < 0) {
                fsgroup_walk_free(w);
                return r;
        }
        (void) sd_event_source_set_description(w->child_source, "fsgroup-walk");
        (void) sd_event_source_set_description(w->stall_timer, "fsgroup-stall");
        *ret = w;
        return 0;
}
