/* SPDX-License-Identifier: Apache-2.0 */
/* Every decoder of an object the API server sends (k8s/objects.c), and the
 * writers' readers of the objects they edit (k8s/writers.c: CSINode drivers,
 * the nodeid annotation, the Node's labels) and of Status bodies.
 *
 * Input: byte 0 picks the decoder, the rest is the JSON text. */
#include <cjson/cJSON.h>

#include "k8s/client.h"
#include "k8s/objects.h"
#include "k8s/writers.h"
#include "test/fuzz/fuzz.h"

static const K8sKind *const kinds[] = {
        &k8s_kind_pod, &k8s_kind_pvc, &k8s_kind_pv, &k8s_kind_csidriver,
        &k8s_kind_volume_attachment, &k8s_kind_node, &k8s_kind_secret,
};

enum {
        DECODE_CSINODE = ELEMENTSOF(kinds),
        DECODE_NODE_ID_ANNOTATION,
        DECODE_NODE_LABELS,
        DECODE_STATUS,
        _DECODE_MAX,
};

#define DRIVER "csi.example.com"

static void decode_kind(const K8sKind *kind, const char *text, size_t size) {
        K8sDecodeError error = {};
        void *o = NULL;
        char buf[256];

        if (k8s_object_decode(kind, text, size, &o, &error) < 0) {
                FUZZ_ASSERT(!o);
                FUZZ_ASSERT(strnlen(error.field, sizeof error.field) < sizeof error.field);
                FUZZ_ASSERT(error.problem);
                return;
        }
        FUZZ_ASSERT(o);
        (void) k8s_meta_describe(o, buf, sizeof buf);
        if (kind == &k8s_kind_pod) {
                const char *field = NULL;
                if (k8s_pod_validate_names(o, &field) < 0)
                        FUZZ_ASSERT(field);
                /* The pod volume rules answer for any decoded pod, with a
                 * problem to report whenever they refuse. */
                const K8sPod *p = o;
                for (size_t i = 0; i < p->n_volumes; i++) {
                        const char *problem = NULL;
                        if (k8s_pod_volume_validate(&p->volumes[i], &problem) < 0)
                                FUZZ_ASSERT(problem);
                        (void) k8s_pod_volume_source(&p->volumes[i]);
                }
                for (size_t i = 0; i < p->n_containers; i++)
                        for (size_t k = 0; k < p->containers[i].n_mounts; k++) {
                                const char *problem = NULL;
                                if (k8s_volume_mount_validate(&p->containers[i].mounts[k], &p->containers[i],
                                                              &problem) < 0)
                                        FUZZ_ASSERT(problem);
                        }
        } else if (kind == &k8s_kind_secret) {
                const K8sSecret *s = o;
                for (size_t i = 0; i < s->n_data; i++) {
                        FUZZ_ASSERT(s->data[i].key);
                        FUZZ_ASSERT(k8s_secret_get(s, s->data[i].key));
                        /* Values are documented NUL-terminated. */
                        FUZZ_ASSERT(s->data[i].value[s->data[i].size] == 0);
                }
        }
        kind->free(o);
}

/* Whether any object in the tree names a key twice: JSON the API server
 * sends never does (Go re-encodes what it stores), so properties that rely
 * on unique keys are checked only without them. */
static bool has_duplicate_keys(const cJSON *j) {
        for (const cJSON *a = j ? j->child : NULL; a; a = a->next) {
                if (cJSON_IsObject(j) && a->string)
                        for (const cJSON *b = a->next; b; b = b->next)
                                if (b->string && strcmp(a->string, b->string) == 0)
                                        return true;
                if (has_duplicate_keys(a))
                        return true;
        }
        return false;
}

static void decode_csinode(const char *text, size_t size, bool remove) {
        cJSON *j = cJSON_ParseWithLength(text, size);
        char *const keys[] = { (char *) "topology.example.com/zone", NULL };
        char *printed;
        int r;

        /* The writer reads only objects (the caller checks). */
        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                return;
        }
        r = k8s_csinode_update_drivers(j, DRIVER, remove ? NULL : "node-1", keys, 5);
        FUZZ_ASSERT(r >= 0);
        printed = cJSON_PrintUnformatted(j);
        FUZZ_ASSERT(printed);
        /* Setting the same entry again changes nothing.  (Removing may: the API
         * server keeps driver names unique, a fuzzer does not.) */
        if (!remove && !has_duplicate_keys(j))
                FUZZ_ASSERT(k8s_csinode_update_drivers(j, DRIVER, "node-1", keys, 5) == 0);
        free(printed);
        cJSON_Delete(j);
}

static void decode_node_id_annotation(const char *text) {
        char *out = NULL, *again = NULL;
        int r;

        r = k8s_node_id_annotation_update(text, DRIVER, "node-1", &out);
        FUZZ_ASSERT(r >= 0 && out);
        /* Idempotent on its own output. */
        FUZZ_ASSERT(k8s_node_id_annotation_update(out, DRIVER, "node-1", &again) == 0);
        FUZZ_ASSERT(again && streq(again, out));
        free(again);
        free(out);
        r = k8s_node_id_annotation_update(text, DRIVER, NULL, &out);
        FUZZ_ASSERT(r >= 0);
        free(out);
}

static void decode_node_labels(const char *text, size_t size) {
        cJSON *j = cJSON_ParseWithLength(text, size), *patch = NULL;
        char *add_keys[] = { (char *) "topology.example.com/zone" }, *add_values[] = { (char *) "zone-a" };
        char *rm_keys[] = { (char *) "topology.example.com/rack" }, *rm_values[] = { (char *) "rack-1" };
        K8sStringMap add = { add_keys, add_values, 1 }, remove = { rm_keys, rm_values, 1 };
        char *message = NULL;
        int r;

        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                return;
        }
        r = k8s_node_labels_patch(j, &add, &remove, &patch, &message);
        FUZZ_ASSERT(r == 0 || r == 1 || r == -EEXIST);
        FUZZ_ASSERT((r == 1) == !!patch);
        FUZZ_ASSERT((r == -EEXIST) == !!message);
        cJSON_Delete(patch);
        free(message);
        cJSON_Delete(j);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        unsigned which;
        char *text;

        if (size < 1)
                return 0;
        which = data[0] % _DECODE_MAX;
        /* The decoders get a length, but the copy is also NUL-terminated for those that do not. */
        text = fuzz_strndup(data + 1, size - 1);
        size--;

        if (which < ELEMENTSOF(kinds))
                decode_kind(kinds[which], text, size);
        else if (which == DECODE_CSINODE) {
                decode_csinode(text, size, false);
                decode_csinode(text, size, true);
        } else if (which == DECODE_NODE_ID_ANNOTATION)
                decode_node_id_annotation(text);
        else if (which == DECODE_NODE_LABELS)
                decode_node_labels(text, size);
        else
                free(k8s_status_message(text, size));
        free(text);
        return 0;
}
