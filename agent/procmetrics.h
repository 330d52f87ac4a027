/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The process_* families every Prometheus client library exports (names,
 * help texts and units as the Go client's process collector), read from
 * /proc at each scrape: process_cpu_seconds_total, process_max_fds,
 * process_open_fds, process_resident_memory_bytes,
 * process_start_time_seconds, process_virtual_memory_bytes and
 * process_virtual_memory_max_bytes.  A value that cannot be read is left
 * out, as the Go client does. */

#include <stdio.h>

typedef struct ProcessSample {
        double cpu_seconds;      /* utime + stime */
        double start_time;       /* seconds since the epoch */
        double resident_bytes;
        double virtual_bytes;
        double open_fds;         /* < 0: unknown */
        double max_fds;          /* < 0: unknown; RLIM_INFINITY as the Go client prints it */
        double virtual_max_bytes;
} ProcessSample;

/* Parses the contents of /proc/<pid>/stat and /proc/stat's btime.  0 or -EINVAL. */
int process_parse_stat(const char *stat, unsigned long long btime, long ticks_per_sec, long page_size,
                       ProcessSample *ret);

/* Reads this process's sample.  0 or -errno. */
int process_sample_read(ProcessSample *ret);

/* Writes the families in text format 0.0.4, sorted by name. */
void process_metrics_write(FILE *f);
