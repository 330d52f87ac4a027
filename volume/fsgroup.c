/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "systemd/log.h"
#include "volume/fsgroup.h"

#define RW_MASK 0660
#define EXEC_MASK 0110
/* Deeper trees are refused rather than walked with unbounded descriptors. */
#define MAX_DEPTH 256
/* The child tells the parent it is alive once per directory and once per
 * this many entries: a byte on a pipe, cheap beside the chown. */
#define PROGRESS_EVERY 64

/* Where the child reports progress (-1: nowhere, as in the tests). */
typedef struct Walker {
        gid_t gid;
        dev_t dev;
        int progress_fd;
        unsigned entries;
} Walker;

static void progress(Walker *w) {
        /* Non-blocking: a full pipe already says "alive". */
        if (w->progress_fd >= 0)
                (void) !write(w->progress_fd, "", 1);
}

/* The volume belongs to a pod: its files can be swapped for symlinks while
 * we walk.  So nothing is ever changed by name after a check: each entry is
 * opened once (O_PATH|O_NOFOLLOW, relative to its directory's descriptor),
 * examined with fstat, and changed through that descriptor; a symlink only
 * ever has its own group changed, and a directory is walked through a
 * descriptor reopened from the one examined (kubelet's CVE-2017-1002101 is
 * the same race through a path name). */
static int fix_opened(int fd, const struct stat *st, gid_t gid) {
        char proc[64];
        mode_t mask = RW_MASK;

        if (fchownat(fd, "", (uid_t) -1, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISLNK(st->st_mode))
                return 0;
        if (S_ISDIR(st->st_mode))
                mask |= EXEC_MASK | S_ISGID;
        if ((st->st_mode & mask) == mask)
                return 0;
        /* fchmod() refuses O_PATH descriptors; the magic link names exactly
         * the inode opened, whatever its name points to now. */
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        return chmod(proc, (st->st_mode & 07777) | mask) < 0 ? -errno : 0;
}

static int walk(Walker *w, int dir_fd, unsigned depth) {
        int list_fd, r = 0;
        struct dirent *de;
        DIR *d;

        if (depth > MAX_DEPTH)
                return -ELOOP;
        list_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
                struct stat st;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                fd = openat(dir_fd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        if (errno == ENOENT)
                                continue; /* removed meanwhile */
                        r = -errno;
                        break;
                }
                if (fstat(fd, &st) < 0) {
                        r = -errno;
                        break;
                }
                if (st.st_dev != w->dev)
                        continue; /* another file system mounted inside: not the volume */
                r = fix_opened(fd, &st, w->gid);
                if (++w->entries % PROGRESS_EVERY == 0)
                        progress(w);
                if (r >= 0 && S_ISDIR(st.st_mode))
                        r = walk(w, fd, depth + 1);
        }
        closedir(d);
        return r;
}

static int apply(const char *path, gid_t gid, bool on_root_mismatch, int progress_fd) {
        Walker w = { .gid = gid, .progress_fd = progress_fd };
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r;

        fd = open(path, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (on_root_mismatch && st.st_gid == gid && (st.st_mode & (RW_MASK | EXEC_MASK | S_ISGID)) ==
                                                            (RW_MASK | EXEC_MASK | S_ISGID))
                return 0;
        r = fix_opened(fd, &st, gid);
        if (r < 0)
                return r;
        w.dev = st.st_dev;
        return walk(&w, fd, 0);
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
        const char *e = getenv("KVOLUMED_TEST_FSGROUP_STALL_MS");
        unsigned long ms;
        char *end;

        if (isempty(e))
                return FSGROUP_STALL_USEC;
        errno = 0;
        ms = strtoul(e, &end, 10);
        return errno == 0 && *end == '\0' && ms > 0 ? (uint64_t) ms * USEC_PER_MSEC : FSGROUP_STALL_USEC;
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
                 * root-dir's lock (volume/rootlock.c), which a child stuck in a
                 * dead file system would otherwise hold after kvolumed is gone. */
                (void) signal(SIGTERM, SIG_DFL);
                if (write_fd > 3)
                        (void) close_range(3, (unsigned) write_fd - 1, 0);
                (void) close_range((unsigned) write_fd + 1, ~0U, 0);
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
