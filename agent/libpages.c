/* SPDX-License-Identifier: Apache-2.0 */
/* kvolumed links libcurl, and Debian's libcurl brings some twenty libraries
 * kvolumed never calls (librtmp and GnuTLS with its p11-kit, nettle and gmp,
 * libssh2, OpenLDAP, Kerberos, libidn2...).  Loading them, their relocations
 * and constructors (GnuTLS initialises itself at load) touch their pages,
 * and a kernel with large page-cache folios maps a whole folio on each such
 * fault: `sleep` alone shows 1.3 MiB of libc resident.  Measured beside 1,000
 * volumes (test/bench/mount.sh): 12.5 of the 19.4 MiB RSS were such library
 * pages, GnuTLS 1.1 MiB of it, while their PSS was 1.4 MiB — page cache that
 * every process shares.
 *
 * Once the start's work is done, madvise(MADV_DONTNEED) drops the page-table
 * entries of every read-only private mapping of a shared library: its pages
 * stay in the page cache, and the code kvolumed does run is mapped again on
 * its next use, by a minor fault.  Only mappings that hold no anonymous page:
 * for those, the file is the content, and dropping an entry loses nothing (a
 * RELRO segment, made read-only after the loader wrote to it, holds
 * anonymous copies and is left alone, as is everything writable). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "agent/libpages.h"
#include "systemd/log.h"
#include "systemd/macro.h"

typedef struct Range {
        unsigned long start, end;
        long rss_kib;
} Range;

static bool is_library(const char *path) {
        size_t l = strlen(path);
        return path[0] == '/' && (strstr(path, ".so.") || (l > 3 && streq(path + l - 3, ".so")));
}

long library_pages_release(void) {
        _cleanup_(fclosep) FILE *f = fopen("/proc/self/smaps", "re");
        _cleanup_free_ char *line = NULL;
        _cleanup_free_ Range *ranges = NULL;
        size_t n = 0, allocated = 0, size = 0;
        bool candidate = false;
        Range cur = {};
        long total = 0;
        int dropped = 0;

        if (!f)
                return -errno;
        while (getline(&line, &size, f) > 0) {
                unsigned long start, end, kib;
                char perms[8], path[512] = "";

                if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %511s", &start, &end, perms, path) >= 3) {
                        /* A new mapping: read-only, private, a library's. */
                        candidate = perms[1] != 'w' && perms[3] == 'p' && is_library(path);
                        cur = (Range) { .start = start, .end = end };
                        continue;
                }
                if (!candidate)
                        continue;
                if (sscanf(line, "Rss: %lu kB", &kib) == 1)
                        cur.rss_kib = (long) kib;
                else if (sscanf(line, "Anonymous: %lu kB", &kib) == 1) {
                        candidate = false; /* one decision per mapping */
                        if (kib > 0 || cur.rss_kib == 0)
                                continue;
                        if (n == allocated) {
                                Range *p = reallocarray(ranges, allocated ? allocated * 2 : 64, sizeof *ranges);
                                if (!p)
                                        return -ENOMEM;
                                ranges = p;
                                allocated = allocated ? allocated * 2 : 64;
                        }
                        ranges[n++] = cur;
                }
        }
        for (size_t i = 0; i < n; i++)
                if (madvise((void *) ranges[i].start, ranges[i].end - ranges[i].start, MADV_DONTNEED) >= 0) {
                        total += ranges[i].rss_kib;
                        dropped++;
                }
        log_debug("Released the page-table entries of %d read-only library mappings, %ld KiB resident: "
                  "the code kvolumed runs is mapped again as it runs", dropped, total);
        return total;
}
