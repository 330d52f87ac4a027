/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "k8s/json-stream.h"

void k8s_json_stream_init(K8sJsonStream *s, size_t max) {
        *s = (K8sJsonStream) { .max = max };
}

void k8s_json_stream_reset(K8sJsonStream *s) {
        s->size = s->scan = s->start = 0;
        s->depth = 0;
        s->in_string = s->escape = false;
}

void k8s_json_stream_done(K8sJsonStream *s) {
        free(s->buf);
        k8s_json_stream_init(s, s->max);
}

static int append(K8sJsonStream *s, const char *data, size_t size) {
        if (size == 0)
                return 0;
        if (s->size + size > s->alloc) {
                size_t a = MAX(s->alloc * 2, s->size + size);
                char *p;
                a = MAX(a, (size_t) 16384);
                p = realloc(s->buf, a);
                if (!p)
                        return -ENOMEM;
                s->buf = p;
                s->alloc = a;
        }
        memcpy(s->buf + s->size, data, size);
        s->size += size;
        return 0;
}

int k8s_json_stream_feed(K8sJsonStream *s, const char *data, size_t size, k8s_json_stream_emit_t emit, void *userdata) {
        int r;

        r = append(s, data, size);
        if (r < 0)
                return r;
        for (; s->scan < s->size; s->scan++) {
                char c = s->buf[s->scan];

                if (s->depth == 0) {
                        if (strchr(" \t\r\n", c)) {
                                s->start = s->scan + 1;
                                continue;
                        }
                        if (c != '{')
                                return -EBADMSG;
                        s->start = s->scan;
                        s->depth = 1;
                        continue;
                }
                if (s->in_string) {
                        if (s->escape)
                                s->escape = false;
                        else if (c == '\\')
                                s->escape = true;
                        else if (c == '"')
                                s->in_string = false;
                        continue;
                }
                switch (c) {
                case '"':
                        s->in_string = true;
                        break;
                case '{':
                case '[':
                        s->depth++;
                        break;
                case '}':
                case ']':
                        if (--s->depth == 0) {
                                r = emit(s->buf + s->start, s->scan + 1 - s->start, userdata);
                                if (r < 0)
                                        return r;
                                s->start = s->scan + 1;
                        }
                        break;
                }
                if (s->scan + 1 - s->start > s->max)
                        return -EFBIG;
        }
        /* Keep only the unfinished object. */
        if (s->start > 0) {
                memmove(s->buf, s->buf + s->start, s->size - s->start);
                s->size -= s->start;
                s->scan -= s->start;
                s->start = 0;
        }
        if (s->size > s->max)
                return -EFBIG;
        return 0;
}
