/* SPDX-License-Identifier: Apache-2.0 */
/* One-line text of a request message for debug logs, with every secret
 * replaced.  protoc-c drops the reference's [(csi_secret) = true] field
 * options, so the secret-bearing fields are listed here; the proto-subset
 * test (test/unit/csi/check-proto-subset.py) checks that this table names
 * exactly the csi_secret fields of the reference within our subset. */
#include <inttypes.h>
#include <stdio.h>

#include "csi/internal.h"

static const struct {
        const char *message;
        const char *field;
} secret_fields[] = {
        /* csi-secret-fields-begin */
        { "csi.v1.NodeStageVolumeRequest", "secrets" },
        { "csi.v1.NodePublishVolumeRequest", "secrets" },
        { "csi.v1.NodeExpandVolumeRequest", "secrets" },
        /* csi-secret-fields-end */
};

/* A key of volume_context that carries credentials all the same: kubelet
 * puts the pod's service account tokens there unless the driver asks for
 * them in secrets (volume/ sets it, CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS). */
static const char *const secret_context_keys[] = {
        "csi.storage.k8s.io/serviceAccount.tokens",
};

static bool context_key_is_secret(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(secret_context_keys); i++)
                if (streq_ptr(key, secret_context_keys[i]))
                        return true;
        return false;
}

bool csi_field_is_secret(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f) {
        for (size_t i = 0; i < ELEMENTSOF(secret_fields); i++)
                if (streq(d->name, secret_fields[i].message) && streq(f->name, secret_fields[i].field))
                        return true;
        return false;
}

static bool is_map_entry(const ProtobufCMessageDescriptor *d) {
        return d->n_fields == 2 && streq(d->fields[0].name, "key") && streq(d->fields[1].name, "value") &&
               d->fields[0].type == PROTOBUF_C_TYPE_STRING && d->fields[1].type == PROTOBUF_C_TYPE_STRING;
}

static void describe(FILE *f, const ProtobufCMessage *m);

static void describe_value(FILE *f, const ProtobufCFieldDescriptor *fd, const void *v) {
        switch (fd->type) {
        case PROTOBUF_C_TYPE_STRING:
                fprintf(f, "\"%s\"", strempty(*(char *const *) v));
                break;
        case PROTOBUF_C_TYPE_BOOL:
                fputs(*(const protobuf_c_boolean *) v ? "true" : "false", f);
                break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                fprintf(f, "%" PRId64, *(const int64_t *) v);
                break;
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                fprintf(f, "%" PRId32, *(const int32_t *) v);
                break;
        case PROTOBUF_C_TYPE_ENUM: {
                const ProtobufCEnumValue *ev =
                        protobuf_c_enum_descriptor_get_value(fd->descriptor, *(const int *) v);
                if (ev)
                        fputs(ev->name, f);
                else
                        fprintf(f, "%d", *(const int *) v);
                break;
        }
        case PROTOBUF_C_TYPE_MESSAGE: {
                const ProtobufCMessage *sub = *(ProtobufCMessage *const *) v;
                if (sub && is_map_entry(sub->descriptor)) {
                        const ProtobufCFieldDescriptor *kf = &sub->descriptor->fields[0],
                                                       *vf = &sub->descriptor->fields[1];
                        const char *key = *(char *const *) (const void *) ((const char *) sub + kf->offset);
                        fprintf(f, "\"%s\":\"%s\"", strempty(key),
                                context_key_is_secret(key)
                                        ? "<redacted>"
                                        : strempty(*(char *const *) (const void *) ((const char *) sub + vf->offset)));
                } else
                        describe(f, sub);
                break;
        }
        default:
                fputs("?", f);
        }
}

/* Proto3 fields at their default value are absent on the wire: leave them out. */
static bool is_default(const ProtobufCFieldDescriptor *fd, const void *v) {
        switch (fd->type) {
        case PROTOBUF_C_TYPE_STRING:
                return isempty(*(char *const *) v);
        case PROTOBUF_C_TYPE_BOOL:
                return !*(const protobuf_c_boolean *) v;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                return *(const int64_t *) v == 0;
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_ENUM:
                return *(const int32_t *) v == 0;
        case PROTOBUF_C_TYPE_MESSAGE:
                return !*(void *const *) v;
        default:
                return false;
        }
}

static size_t field_size(const ProtobufCFieldDescriptor *fd) {
        switch (fd->type) {
        case PROTOBUF_C_TYPE_STRING:
        case PROTOBUF_C_TYPE_MESSAGE:
                return sizeof(void *);
        case PROTOBUF_C_TYPE_BOOL:
                return sizeof(protobuf_c_boolean);
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                return sizeof(int64_t);
        default:
                return sizeof(int32_t);
        }
}

static void describe(FILE *f, const ProtobufCMessage *m) {
        const ProtobufCMessageDescriptor *d;
        bool first = true;

        if (!m) {
                fputs("null", f);
                return;
        }
        d = m->descriptor;
        fputc('{', f);
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *fd = &d->fields[i];
                const char *member = (const char *) m + fd->offset;
                size_t n = 1;

                if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
                        n = *(const size_t *) (const void *) ((const char *) m + fd->quantifier_offset);
                        if (n == 0)
                                continue;
                } else if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                        if (*(const uint32_t *) (const void *) ((const char *) m + fd->quantifier_offset) != fd->id)
                                continue;
                } else if (is_default(fd, member))
                        continue;

                fprintf(f, "%s%s:", first ? "" : ", ", fd->name);
                first = false;
                if (csi_field_is_secret(d, fd)) {
                        /* Not even the keys: a key can say too much ("password-for-prod-db"). */
                        fprintf(f, "<%zu redacted>", n);
                        continue;
                }
                if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
                        const char *arr = *(char *const *) (const void *) member;
                        fputc('[', f);
                        for (size_t j = 0; j < n; j++) {
                                if (j > 0)
                                        fputs(", ", f);
                                describe_value(f, fd, arr + j * field_size(fd));
                        }
                        fputc(']', f);
                } else
                        describe_value(f, fd, member);
        }
        fputc('}', f);
}

char *csi_describe_message(const ProtobufCMessage *m) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        if (!f)
                return NULL;
        describe(f, m);
        if (fclose(f) != 0) {
                free(buf);
                return NULL;
        }
        return buf;
}
