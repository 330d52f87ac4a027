/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include <cjson/cJSON.h>

#include "volume/state/voldata.h"

typedef struct KeyRef {
        const char *key;
        size_t offset;
} KeyRef;

/* Sorted by key, as Go sorts map keys (byte order). */
static const KeyRef keys[] = {
        { "attachmentID", offsetof(VolData, attachment_id) },
        { "driverName", offsetof(VolData, driver_name) },
        { "nodeName", offsetof(VolData, node_name) },
        { "seLinuxMountContext", offsetof(VolData, selinux_mount_context) },
        { "specVolID", offsetof(VolData, spec_vol_id) },
        { "volumeHandle", offsetof(VolData, volume_handle) },
        { "volumeLifecycleMode", offsetof(VolData, volume_lifecycle_mode) },
};

#define FIELD(d, k) (*(char **) ((uint8_t *) (d) + (k).offset))

/* Length of a valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s) {
        if (s[0] < 0x80)
                return 1;
        if (s[0] >= 0xc2 && s[0] <= 0xdf && (s[1] & 0xc0) == 0x80)
                return 2;
        if (s[0] >= 0xe0 && s[0] <= 0xef && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
                if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f))
                        return 0;
                return 3;
        }
        if (s[0] >= 0xf0 && s[0] <= 0xf4 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
            (s[3] & 0xc0) == 0x80) {
                if ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
                        return 0;
                return 4;
        }
        return 0;
}

/* Go's encoding/json string rules with HTML escaping on. */
static void write_go_string(FILE *f, const char *str) {
        const unsigned char *s = (const unsigned char *) str;

        fputc('"', f);
        while (*s) {
                size_t n;
                switch (*s) {
                case '"':
                        fputs("\\\"", f);
                        s++;
                        continue;
                case '\\':
                        fputs("\\\\", f);
                        s++;
                        continue;
                case '\n':
                        fputs("\\n", f);
                        s++;
                        continue;
                case '\r':
                        fputs("\\r", f);
                        s++;
                        continue;
                case '\t':
                        fputs("\\t", f);
                        s++;
                        continue;
                case '<':
                case '>':
                case '&':
                        fprintf(f, "\\u00%02x", *s);
                        s++;
                        continue;
                default:
                        break;
                }
                if (*s < 0x20) {
                        fprintf(f, "\\u00%02x", *s);
                        s++;
                        continue;
                }
                n = utf8_len(s);
                if (n == 0) {
                        fputs("\\ufffd", f);
                        s++;
                        continue;
                }
                if (n == 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9)) {
                        fprintf(f, "\\u202%c", s[2] == 0xa8 ? '8' : '9');
                        s += 3;
                        continue;
                }
                fwrite(s, 1, n, f);
                s += n;
        }
        fputc('"', f);
}

int vol_data_format(const VolData *d, char **ret) {
        char *text = NULL;
        size_t size = 0;
        bool first = true;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return -ENOMEM;
        fputc('{', f);
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const char *v = FIELD(d, keys[i]);
                if (!v)
                        continue;
                if (!first)
                        fputc(',', f);
                first = false;
                write_go_string(f, keys[i].key);
                fputc(':', f);
                write_go_string(f, v);
        }
        fputs("}\n", f);
        if (fclose(f) != 0) {
                free(text);
                return -ENOMEM;
        }
        *ret = text;
        return 0;
}

int vol_data_parse(const char *text, VolData *ret) {
        cJSON *root = cJSON_Parse(text), *item;
        VolData d = {};

        if (!root || !cJSON_IsObject(root)) {
                cJSON_Delete(root);
                return -EBADMSG;
        }
        cJSON_ArrayForEach(item, root) {
                if (!cJSON_IsString(item)) {
                        cJSON_Delete(root);
                        vol_data_done(&d);
                        return -EBADMSG;
                }
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        if (streq(item->string, keys[i].key) && !FIELD(&d, keys[i])) {
                                FIELD(&d, keys[i]) = strdup(item->valuestring);
                                if (!FIELD(&d, keys[i])) {
                                        cJSON_Delete(root);
                                        vol_data_done(&d);
                                        return -ENOMEM;
                                }
                        }
        }
        cJSON_Delete(root);
        *ret = d;
        return 0;
}

void vol_data_done(VolData *d) {
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                FIELD(d, keys[i]) = mfree_str(FIELD(d, keys[i]));
}
