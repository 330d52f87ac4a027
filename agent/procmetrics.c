/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "agent/procmetrics.h"
#include "systemd/macro.h"

int process_parse_stat(const char *stat, unsigned long long btime, long ticks_per_sec, long page_size,
                       ProcessSample *ret) {
        unsigned long long utime, stime, starttime, vsize;
        long long rss;
        const char *p;

        /* The command name (field 2) is in parentheses and may hold spaces
         * and ')': the fields resume after the last ')'. */
        p = stat ? strrchr(stat, ')') : NULL;
        if (!p || ticks_per_sec <= 0 || page_size <= 0)
                return -EINVAL;
        /* Fields 3 (state) ... 24 (rss), see proc(5). */
        if (sscanf(p + 1,
                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu %lld",
                   &utime, &stime, &starttime, &vsize, &rss) != 5)
                return -EINVAL;
        *ret = (ProcessSample) {
                .cpu_seconds = (double) (utime + stime) / (double) ticks_per_sec,
                .start_time = (double) btime + (double) starttime / (double) ticks_per_sec,
                .resident_bytes = (double) rss * (double) page_size,
                .virtual_bytes = (double) vsize,
                .open_fds = -1,
                .max_fds = -1,
                .virtual_max_bytes = -1,
        };
        return 0;
}

static int read_file(const char *path, char *buf, size_t size) {
        FILE *f = fopen(path, "re");
        size_t n;

        if (!f)
                return -errno;
        n = fread(buf, 1, size - 1, f);
        fclose(f);
        buf[n] = '\0';
        return n > 0 ? 0 : -EIO;
}

static int read_btime(unsigned long long *ret) {
        _cleanup_(fclosep) FILE *f = fopen("/proc/stat", "re");
        char line[256];

        if (!f)
                return -errno;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "btime %llu", ret) == 1)
                        return 0;
        return -ENOENT;
}

static double open_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        double n = 0;

        if (!d)
                return -1;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n - 1; /* not the descriptor that reads the directory */
}

/* RLIM_INFINITY is printed as the Go client prints it: as a uint64. */
static double rlimit_soft(int resource) {
        struct rlimit rl;
        if (getrlimit(resource, &rl) < 0)
                return -1;
        return (double) (uint64_t) rl.rlim_cur;
}

int process_sample_read(ProcessSample *ret) {
        char stat[1024];
        unsigned long long btime;
        int r;

        r = read_file("/proc/self/stat", stat, sizeof stat);
        if (r < 0)
                return r;
        r = read_btime(&btime);
        if (r < 0)
                return r;
        r = process_parse_stat(stat, btime, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), ret);
        if (r < 0)
                return r;
        ret->open_fds = open_fds();
        ret->max_fds = rlimit_soft(RLIMIT_NOFILE);
        ret->virtual_max_bytes = rlimit_soft(RLIMIT_AS);
        return 0;
}

static void write_one(FILE *f, const char *name, const char *help, const char *type, double value) {
        char buf[32];

        if (value < 0)
                return;
        /* The shortest text that reads back as the same double, as the Go client. */
        for (int precision = 1; precision <= 17; precision++) {
                snprintf(buf, sizeof buf, "%.*g", precision, value);
                if (strtod(buf, NULL) == value)
                        break;
        }
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, type, name, buf);
}

void process_metrics_write(FILE *f) {
        ProcessSample s;

        if (process_sample_read(&s) < 0)
                return;
        /* Help texts as the Go client's process collector. */
        write_one(f, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter",
                  s.cpu_seconds);
        write_one(f, "process_max_fds", "Maximum number of open file descriptors.", "gauge", s.max_fds);
        write_one(f, "process_open_fds", "Number of open file descriptors.", "gauge", s.open_fds);
        write_one(f, "process_resident_memory_bytes", "Resident memory size in bytes.", "gauge", s.resident_bytes);
        write_one(f, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                  "gauge", s.start_time);
        write_one(f, "process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge", s.virtual_bytes);
        write_one(f, "process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.",
                  "gauge", s.virtual_max_bytes);
}
