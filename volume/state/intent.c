/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "volume/state/intent.h"

static const char *const op_kind_names[_OP_KIND_MAX] = {
        [OP_STAGE] = "stage",
        [OP_PUBLISH] = "publish",
        [OP_UNPUBLISH] = "unpublish",
        [OP_UNSTAGE] = "unstage",
};

const char *op_kind_to_string(OpKind kind) {
        return kind >= 0 && kind < _OP_KIND_MAX ? op_kind_names[kind] : "?";
}

OpKind op_kind_from_string(const char *s) {
        for (OpKind k = 0; k < _OP_KIND_MAX; k++)
                if (streq_ptr(s, op_kind_names[k]))
                        return k;
        return _OP_KIND_INVALID;
}

static bool boot_id_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= BOOT_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strchr("0123456789abcdef-", s[i]))
                        return false;
        return true;
}

int intent_format(const Intent *i, char **ret) {
        cJSON *o = cJSON_CreateObject();
        char *text = NULL;

        if (!o)
                return -ENOMEM;
        if (!cJSON_AddNumberToObject(o, "version", INTENT_VERSION) ||
            !cJSON_AddStringToObject(o, "operation", op_kind_to_string(i->operation)) ||
            !cJSON_AddBoolToObject(o, "done", i->done) || !cJSON_AddBoolToObject(o, "mount", i->mount) ||
            !cJSON_AddStringToObject(o, "bootID", i->boot_id) ||
            (i->pod && !cJSON_AddStringToObject(o, "pod", i->pod)) ||
            (i->device && !cJSON_AddStringToObject(o, "device", i->device)) ||
            (i->device_serial && !cJSON_AddStringToObject(o, "deviceSerial", i->device_serial)) ||
            (i->device_link && !cJSON_AddStringToObject(o, "deviceLink", i->device_link)))
                goto out;
        text = cJSON_PrintUnformatted(o);
out:
        cJSON_Delete(o);
        if (!text)
                return -ENOMEM;
        *ret = text;
        return 0;
}

static int object_version(const cJSON *o) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "version");

        if (!v)
                return 1;
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e6 ||
            v->valuedouble != (double) (int) v->valuedouble)
                return -EBADMSG;
        return (int) v->valuedouble;
}

int intent_version(const char *text) {
        cJSON *o = cJSON_Parse(text);
        int r = cJSON_IsObject(o) ? object_version(o) : -EBADMSG;
        cJSON_Delete(o);
        return r;
}

int intent_parse(const char *text, Intent *ret) {
        cJSON *o = cJSON_Parse(text);
        const cJSON *op, *done, *mount, *boot, *pod;
        Intent i = {};
        int r = -EBADMSG, version;

        if (!cJSON_IsObject(o))
                goto out;
        /* A newer format may mean anything by the fields below. */
        version = object_version(o);
        if (version < 0)
                goto out;
        if (version > INTENT_VERSION) {
                r = -EPROTONOSUPPORT;
                goto out;
        }
        op = cJSON_GetObjectItemCaseSensitive(o, "operation");
        done = cJSON_GetObjectItemCaseSensitive(o, "done");
        mount = cJSON_GetObjectItemCaseSensitive(o, "mount");
        boot = cJSON_GetObjectItemCaseSensitive(o, "bootID");
        pod = cJSON_GetObjectItemCaseSensitive(o, "pod");
        if (!cJSON_IsString(op) || !cJSON_IsBool(done) || !cJSON_IsBool(mount) || !cJSON_IsString(boot) ||
            (pod && !cJSON_IsString(pod)))
                goto out;
        i.operation = op_kind_from_string(op->valuestring);
        if (i.operation == _OP_KIND_INVALID || !boot_id_valid(boot->valuestring))
                goto out;
        i.done = cJSON_IsTrue(done);
        i.mount = cJSON_IsTrue(mount);
        snprintf(i.boot_id, sizeof i.boot_id, "%s", boot->valuestring);
        if (pod && !(i.pod = strdup(pod->valuestring))) {
                r = -ENOMEM;
                goto out;
        }
        static const struct {
                const char *key;
                size_t offset;
        } optional[] = {
                { "device", offsetof(Intent, device) },
                { "deviceSerial", offsetof(Intent, device_serial) },
                { "deviceLink", offsetof(Intent, device_link) },
        };
        for (size_t k = 0; k < ELEMENTSOF(optional); k++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, optional[k].key);
                char **field = (char **) ((uint8_t *) &i + optional[k].offset);
                if (!v)
                        continue;
                if (!cJSON_IsString(v)) {
                        intent_done(&i);
                        goto out;
                }
                if (!(*field = strdup(v->valuestring))) {
                        intent_done(&i);
                        r = -ENOMEM;
                        goto out;
                }
        }
        *ret = i;
        r = 0;
out:
        cJSON_Delete(o);
        return r;
}

void intent_done(Intent *i) {
        free(i->pod);
        free(i->device);
        free(i->device_serial);
        free(i->device_link);
        i->pod = i->device = i->device_serial = i->device_link = NULL;
}

int intent_record_dirs(RootDir *root, const char *relpath) {
        _cleanup_free_ char *dir = strdup(relpath);
        char *slash;

        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (!slash)
                return -EINVAL;
        *slash = '\0';
        return root_dir_mkdir_p(root, dir, 0750, NULL);
}

int intent_record_remove(RootDir *root, const char *relpath) {
        _cleanup_free_ char *dir = strdup(relpath);
        int r;

        if (!dir)
                return -ENOMEM;
        r = root_dir_unlink(root, relpath);
        if (r < 0)
                return r;
        /* The mirror of the volume dir's path, up to RECORDS_DIR itself. */
        for (char *slash; (slash = strrchr(dir, '/'));) {
                *slash = '\0';
                if (root_dir_rmdir(root, dir) < 0)
                        return 0;
        }
        (void) root_dir_rmdir(root, dir);
        return 0;
}

int boot_id_read(char ret[static BOOT_ID_MAX]) {
        char buf[64];
        ssize_t n;
        int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n < 0)
                return -errno;
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
                n--;
        buf[n] = '\0';
        if (!boot_id_valid(buf))
                return -EBADMSG;
        memcpy(ret, buf, (size_t) n + 1);
        return 0;
}
