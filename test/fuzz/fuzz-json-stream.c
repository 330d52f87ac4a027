/* SPDX-License-Identifier: Apache-2.0 */
/* A watch body as the API server streams it: split into events by
 * k8s/json-stream.c with chunk boundaries anywhere, then each event read as
 * the informer reads it ({"type", "object"}) and its object decoded.
 *
 * Input: byte 0 picks the kind, byte 1 seeds the chunk sizes, the rest is the
 * body. */
#include <cjson/cJSON.h>

#include "k8s/json-stream.h"
#include "k8s/objects.h"
#include "test/fuzz/fuzz.h"

/* Small, so that -EFBIG is reachable with small inputs. */
#define FUZZ_MAX_EVENT (64u * 1024u)

static const K8sKind *const kinds[] = {
        &k8s_kind_pod, &k8s_kind_pvc, &k8s_kind_pv, &k8s_kind_csidriver,
        &k8s_kind_volume_attachment, &k8s_kind_node, &k8s_kind_secret,
};

typedef struct Stream {
        const K8sKind *kind;
        size_t n_events;
} Stream;

static int on_event(const char *text, size_t size, void *userdata) {
        Stream *s = userdata;
        cJSON *j, *type, *obj;
        K8sDecodeError error = {};
        void *o = NULL;

        /* What the splitter promises: from '{' to the bracket that closes it.  It
         * counts nesting only, so "{]" passes: the JSON parser refuses that. */
        FUZZ_ASSERT(size >= 2 && size <= FUZZ_MAX_EVENT);
        FUZZ_ASSERT(text[0] == '{' && (text[size - 1] == '}' || text[size - 1] == ']'));
        s->n_events++;

        j = cJSON_ParseWithLength(text, size);
        type = cJSON_GetObjectItemCaseSensitive(j, "type");
        obj = cJSON_GetObjectItemCaseSensitive(j, "object");
        if (j && cJSON_IsString(type) && cJSON_IsObject(obj)) {
                if (s->kind->decode(obj, &o, &error) >= 0) {
                        FUZZ_ASSERT(o);
                        if (s->kind == &k8s_kind_pod) {
                                const char *field = NULL;
                                (void) k8s_pod_validate_names(o, &field);
                        }
                        s->kind->free(o);
                } else
                        FUZZ_ASSERT(strnlen(error.field, sizeof error.field) < sizeof error.field);
        }
        cJSON_Delete(j);
        /* A consumer may stop the stream: every 7th event says so. */
        return s->n_events % 7 == 0 ? -ECANCELED : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet_logs();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        K8sJsonStream stream;
        Stream s = {};
        uint32_t rng;
        int r = 0;

        if (size < 2)
                return 0;
        s.kind = kinds[data[0] % ELEMENTSOF(kinds)];
        rng = data[1] | 1u;
        data += 2;
        size -= 2;

        k8s_json_stream_init(&stream, FUZZ_MAX_EVENT);
        while (size > 0) {
                /* xorshift: chunk sizes from 1 byte to the whole rest. */
                rng ^= rng << 13;
                rng ^= rng >> 17;
                rng ^= rng << 5;
                size_t n = (rng & 7) == 0 ? size : 1 + rng % MIN(size, (size_t) 64);
                r = k8s_json_stream_feed(&stream, (const char *) data, n, on_event, &s);
                FUZZ_ASSERT(r == 0 || r == -EBADMSG || r == -EFBIG || r == -ECANCELED);
                if (r < 0) {
                        /* The informer drops the watch and starts a new one on the same stream. */
                        k8s_json_stream_reset(&stream);
                }
                data += n;
                size -= n;
        }
        k8s_json_stream_done(&stream);
        return 0;
}
