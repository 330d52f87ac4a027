/* SPDX-License-Identifier: Apache-2.0 */
/* The libraries' floor of kvolumed's memory (test/bench/memory.sh): a
 * process linked with the libraries kvolumed links (meson.build's
 * dependencies), each initialised as kvolumed does at start, that makes one
 * HTTPS request to URL (the fake API server, TLS as the API client has it)
 * and one SHA-256, then prints its /proc/self/status memory lines and exits.
 * Whatever kvolumed holds above this is its own: its binary, its heap, its
 * threads' stacks.  Built by the bench with gcc and pkg-config; not part of
 * kvolumed.
 *
 *      libfloor URL */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <ini.h>
#include <libmount/libmount.h>
#include <libudev.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-event.h>
#include <yaml.h>

static size_t discard(char *data, size_t size, size_t n, void *userdata) {
        (void) data;
        (void) userdata;
        return size * n;
}

static int no_ini_entry(void *user, const char *section, const char *name, const char *value) {
        (void) user;
        (void) section;
        (void) name;
        (void) value;
        return 1;
}

int main(int argc, char **argv) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int md_len = 0;
        struct libmnt_table *table;
        struct udev *udev;
        yaml_parser_t parser;
        sd_event *event = NULL;
        cJSON *json;
        CURL *curl;
        CURLcode cc;
        FILE *status;
        char line[256];

        if (argc != 2) {
                fprintf(stderr, "usage: libfloor URL\n");
                return 2;
        }
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || sd_event_default(&event) < 0)
                return 1;
        table = mnt_new_table_from_file("/proc/self/mountinfo");
        udev = udev_new();
        json = cJSON_Parse("{\"kind\":\"Pod\"}");
        if (!yaml_parser_initialize(&parser) || !table || !udev || !json)
                return 1;
        (void) ini_parse_string("[agent]\n", no_ini_entry, NULL);
        (void) protobuf_c_version();
        (void) MHD_get_version();
        if (!EVP_Digest("kvolumed", 8, md, &md_len, EVP_sha256(), NULL))
                return 1;

        curl = curl_easy_init();
        if (!curl)
                return 1;
        curl_easy_setopt(curl, CURLOPT_URL, argv[1]);
        curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
        cc = curl_easy_perform(curl);
        if (cc != CURLE_OK) {
                fprintf(stderr, "libfloor: %s: %s\n", argv[1], curl_easy_strerror(cc));
                return 1;
        }

        status = fopen("/proc/self/status", "re");
        if (!status)
                return 1;
        while (fgets(line, sizeof line, status))
                if (strncmp(line, "VmRSS:", 6) == 0 || strncmp(line, "RssAnon:", 8) == 0 ||
                    strncmp(line, "RssFile:", 8) == 0)
                        fputs(line, stdout);
        fclose(status);
        curl_easy_cleanup(curl);
        cJSON_Delete(json);
        yaml_parser_delete(&parser);
        udev_unref(udev);
        mnt_unref_table(table);
        sd_event_unref(event);
        curl_global_cleanup();
        return 0;
}
