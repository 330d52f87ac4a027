/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Splits a stream of concatenated JSON objects (a watch body: one event per
 * line, but chunk boundaries fall anywhere) into complete object texts, as
 * the bytes arrive.  Only the nesting of braces and brackets outside strings
 * is tracked; the texts are parsed later. */

#include <stddef.h>

#include "systemd/macro.h"

#define K8S_MAX_WATCH_EVENT (16u * 1024u * 1024u)

typedef struct K8sJsonStream {
        char *buf;
        size_t size, alloc;
        size_t scan;  /* bytes of buf already scanned */
        size_t start; /* where the current object starts */
        unsigned depth;
        bool in_string, escape;
        size_t max; /* largest object accepted */
} K8sJsonStream;

/* Called for each complete object; return <0 to stop. */
typedef int (*k8s_json_stream_emit_t)(const char *text, size_t size, void *userdata);

void k8s_json_stream_init(K8sJsonStream *s, size_t max);
void k8s_json_stream_done(K8sJsonStream *s);
void k8s_json_stream_reset(K8sJsonStream *s);
/* -EFBIG when an object grows past max, -EBADMSG when something other than
 * an object appears between objects, or the emit callback's error. */
int k8s_json_stream_feed(K8sJsonStream *s, const char *data, size_t size, k8s_json_stream_emit_t emit, void *userdata);
