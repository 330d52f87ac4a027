/* SPDX-License-Identifier: Apache-2.0 */
/* library_pages_release() (agent/libpages.c): the read-only library pages
 * mapped at start leave the process's RSS, what the loader wrote (RELRO,
 * data) stays, and the libraries keep working. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <cmocka.h>

#include "agent/libpages.h"

/* Sums over the shared libraries' mappings: resident KiB of the read-only
 * ones, and anonymous KiB of all (the loader's writes). */
static void library_kib(long *ret_readonly_rss, long *ret_anon) {
        FILE *f = fopen("/proc/self/smaps", "re");
        char line[1024], perms[8] = "", path[512];
        bool lib = false;
        long kib;

        *ret_readonly_rss = *ret_anon = 0;
        assert_non_null(f);
        while (fgets(line, sizeof line, f)) {
                unsigned long a, b;
                path[0] = '\0';
                if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %511s", &a, &b, perms, path) >= 3) {
                        lib = path[0] == '/' && strstr(path, ".so");
                        continue;
                }
                if (!lib)
                        continue;
                if (sscanf(line, "Rss: %ld kB", &kib) == 1 && perms[1] != 'w')
                        *ret_readonly_rss += kib;
                else if (sscanf(line, "Anonymous: %ld kB", &kib) == 1)
                        *ret_anon += kib;
        }
        fclose(f);
}

static void test_release_keeps_what_was_written(void **state) {
        long rss_before, anon_before, rss_after, anon_after;

        /* Some library code run first, as kvolumed's start does. */
        assert_int_equal(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
        library_kib(&rss_before, &anon_before);
        assert_true(rss_before > 0);

        long released = library_pages_release();
        assert_true(released > 0);
        library_kib(&rss_after, &anon_after);
        assert_true(rss_after < rss_before);
        /* The loader's writes are anonymous pages: none was dropped. */
        assert_int_equal(anon_after, anon_before);

        /* The libraries run again, their code mapped back as it runs. */
        const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
        assert_non_null(v);
        assert_non_null(v->ssl_version);
        CURL *e = curl_easy_init();
        assert_non_null(e);
        assert_int_equal(curl_easy_setopt(e, CURLOPT_URL, "http://localhost/"), CURLE_OK);
        curl_easy_cleanup(e);
        cJSON *j = cJSON_Parse("{\"a\":[1,2,{\"b\":\"c\"}]}");
        assert_non_null(j);
        char *text = cJSON_PrintUnformatted(j);
        assert_string_equal(text, "{\"a\":[1,2,{\"b\":\"c\"}]}");
        cJSON_free(text);
        cJSON_Delete(j);
        curl_global_cleanup();
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_release_keeps_what_was_written),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
