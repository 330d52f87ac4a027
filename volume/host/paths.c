/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>

#include <openssl/evp.h>

#include "systemd/validate.h"
#include "volume/host/paths.h"

static int hash_name(char ret[static CSI_HASH_NAME_MAX], ...) {
        static const char hex[] = "0123456789abcdef";
        unsigned char digest[32];
        unsigned len = 0;
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        va_list ap;
        int r = -EIO;

        if (!ctx)
                return -ENOMEM;
        if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
                goto out;
        /* Plain concatenation, no separator, exactly as kubelet hashes. */
        va_start(ap, ret);
        for (const char *s; (s = va_arg(ap, const char *));)
                if (EVP_DigestUpdate(ctx, s, strlen(s)) != 1) {
                        va_end(ap);
                        goto out;
                }
        va_end(ap);
        if (EVP_DigestFinal_ex(ctx, digest, &len) != 1 || len != sizeof digest)
                goto out;
        memcpy(ret, "csi-", 4);
        for (unsigned i = 0; i < sizeof digest; i++) {
                ret[4 + 2 * i] = hex[digest[i] >> 4];
                ret[5 + 2 * i] = hex[digest[i] & 15];
        }
        ret[CSI_HASH_NAME_MAX - 1] = '\0';
        r = 0;
out:
        EVP_MD_CTX_free(ctx);
        return r;
}

int csi_ephemeral_handle(const char *pod_uid, const char *volume_name, char ret[static CSI_HASH_NAME_MAX]) {
        if (validate_uid(pod_uid) < 0 || isempty(volume_name))
                return -EINVAL;
        return hash_name(ret, pod_uid, volume_name, (const char *) NULL);
}

int csi_attachment_name(const char *handle, const char *driver, const char *node_name,
                        char ret[static CSI_HASH_NAME_MAX]) {
        if (isempty(handle) || isempty(driver) || isempty(node_name))
                return -EINVAL;
        return hash_name(ret, handle, driver, node_name, (const char *) NULL);
}

int csi_unique_volume_name(const char *driver, const char *handle, char **ret) {
        if (validate_csi_driver_name(driver) < 0 || isempty(handle))
                return -EINVAL;
        return asprintf(ret, CSI_PLUGIN_NAME "/%s^%s", driver, handle) < 0 ? -ENOMEM : 0;
}

static int make_path(char **ret, const char *format, ...) _printf_(2, 3);
static int make_path(char **ret, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = vasprintf(ret, format, ap);
        va_end(ap);
        return r < 0 ? -ENOMEM : 0;
}

int path_pod_volume_dir(const char *pod_uid, const char *spec_name, char **ret) {
        if (validate_uid(pod_uid) < 0 || validate_path_component(spec_name) < 0)
                return -EINVAL;
        return make_path(ret, "pods/%s/volumes/" CSI_PLUGIN_NAME_ESCAPED "/%s", pod_uid, spec_name);
}

int path_publish_target(const char *pod_uid, const char *spec_name, char **ret) {
        if (validate_uid(pod_uid) < 0 || validate_path_component(spec_name) < 0)
                return -EINVAL;
        return make_path(ret, "pods/%s/volumes/" CSI_PLUGIN_NAME_ESCAPED "/%s/mount", pod_uid, spec_name);
}

int path_parse_publish_target(const char *relpath, char **ret_uid, char **ret_spec_name) {
        static const char prefix[] = "pods/", middle[] = "/volumes/" CSI_PLUGIN_NAME_ESCAPED "/", suffix[] = "/mount";
        _cleanup_free_ char *uid = NULL, *spec_name = NULL;
        const char *p = relpath, *slash;
        size_t n = strlen(relpath);

        if (strncmp(p, prefix, strlen(prefix)) != 0 || n < strlen(suffix) ||
            !streq(relpath + n - strlen(suffix), suffix))
                return -EINVAL;
        p += strlen(prefix);
        slash = strchr(p, '/');
        if (!slash || !(uid = strndup(p, slash - p)))
                return -EINVAL;
        if (strncmp(slash, middle, strlen(middle)) != 0)
                return -EINVAL;
        p = slash + strlen(middle);
        if (!(spec_name = strndup(p, (size_t) (relpath + n - strlen(suffix) - p))))
                return -ENOMEM;
        if (validate_uid(uid) < 0 || validate_path_component(spec_name) < 0)
                return -EINVAL;
        *ret_uid = TAKE_PTR(uid);
        *ret_spec_name = TAKE_PTR(spec_name);
        return 0;
}

static int staging_hash(const char *driver, const char *handle, char hex[static 65]) {
        char name[CSI_HASH_NAME_MAX];
        int r;

        if (validate_csi_driver_name(driver) < 0 || isempty(handle))
                return -EINVAL;
        /* Only the handle is hashed; hash_name's "csi-" prefix is dropped. */
        r = hash_name(name, handle, (const char *) NULL);
        if (r < 0)
                return r;
        memcpy(hex, name + 4, 65);
        return 0;
}

int path_staging_volume_dir(const char *driver, const char *handle, char **ret) {
        char hex[65];
        int r = staging_hash(driver, handle, hex);
        if (r < 0)
                return r;
        return make_path(ret, "plugins/" CSI_PLUGIN_NAME "/%s/%s", driver, hex);
}

int path_staging_target(const char *driver, const char *handle, char **ret) {
        char hex[65];
        int r = staging_hash(driver, handle, hex);
        if (r < 0)
                return r;
        return make_path(ret, "plugins/" CSI_PLUGIN_NAME "/%s/%s/globalmount", driver, hex);
}

static bool volume_dir_ok(const char *volume_dir) {
        return !isempty(volume_dir) && volume_dir[0] != '/' && !streq(volume_dir, RECORDS_DIR) &&
               strncmp(volume_dir, RECORDS_DIR "/", strlen(RECORDS_DIR "/")) != 0;
}

int path_intent_record(const char *volume_dir, const char *pod_uid, char **ret) {
        if (!volume_dir_ok(volume_dir) || (pod_uid && validate_uid(pod_uid) < 0))
                return -EINVAL;
        if (pod_uid)
                return make_path(ret, RECORDS_DIR "/%s/" BLOCK_INTENT_PREFIX "%s.json", volume_dir, pod_uid);
        return make_path(ret, RECORDS_DIR "/%s/" INTENT_FILE, volume_dir);
}

int path_legacy_intent_record(const char *volume_dir, const char *pod_uid, char **ret) {
        if (!volume_dir_ok(volume_dir) || (pod_uid && validate_uid(pod_uid) < 0))
                return -EINVAL;
        if (pod_uid)
                return make_path(ret, "%s/" BLOCK_INTENT_PREFIX "%s.json", volume_dir, pod_uid);
        return make_path(ret, "%s/" INTENT_FILE, volume_dir);
}

bool path_intent_record_name(const char *name) {
        size_t n = strlen(name);

        return streq(name, INTENT_FILE) || (strncmp(name, BLOCK_INTENT_PREFIX, strlen(BLOCK_INTENT_PREFIX)) == 0 &&
                                            n > 5 && streq(name + n - 5, ".json"));
}

int path_parse_intent_record(const char *relpath, char **ret_volume_dir) {
        const char *name, *prefix = RECORDS_DIR "/";

        if (strncmp(relpath, prefix, strlen(prefix)) != 0 || !(name = strrchr(relpath, '/')))
                return -EINVAL;
        name++;
        if (!path_intent_record_name(name))
                return -EINVAL;
        if (name - 1 <= relpath + strlen(prefix))
                return -EINVAL;
        *ret_volume_dir = strndup(relpath + strlen(prefix), (size_t) (name - 1 - relpath - strlen(prefix)));
        return *ret_volume_dir ? 0 : -ENOMEM;
}

#define BLOCK_DIR "plugins/" CSI_PLUGIN_NAME "/volumeDevices"

int path_block_map_dir(const char *spec_name, char **ret) {
        if (validate_path_component(spec_name) < 0 || streq(spec_name, "staging") || streq(spec_name, "publish"))
                return -EINVAL;
        return make_path(ret, BLOCK_DIR "/%s/dev", spec_name);
}

int path_block_data_dir(const char *spec_name, char **ret) {
        if (validate_path_component(spec_name) < 0 || streq(spec_name, "staging") || streq(spec_name, "publish"))
                return -EINVAL;
        return make_path(ret, BLOCK_DIR "/%s/data", spec_name);
}

int path_block_staging(const char *spec_name, char **ret) {
        if (validate_path_component(spec_name) < 0)
                return -EINVAL;
        return make_path(ret, BLOCK_DIR "/staging/%s", spec_name);
}

int path_block_publish(const char *spec_name, const char *pod_uid, char **ret) {
        if (validate_path_component(spec_name) < 0 || validate_uid(pod_uid) < 0)
                return -EINVAL;
        return make_path(ret, BLOCK_DIR "/publish/%s/%s", spec_name, pod_uid);
}

int path_pod_device_dir(const char *pod_uid, char **ret) {
        if (validate_uid(pod_uid) < 0)
                return -EINVAL;
        return make_path(ret, "pods/%s/volumeDevices/" CSI_PLUGIN_NAME_ESCAPED, pod_uid);
}
