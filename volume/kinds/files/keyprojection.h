/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A configMap's or secret's keys as files: kubelet's MakePayload
 * (pkg/volume/configmap, pkg/volume/secret), shared by the configMap and
 * secret kinds and by projected's configMap and secret sources.
 *
 *   - no items: every key (data, then binaryData) is a file named as the
 *     key, with default_mode;
 *   - items: only the keys named, each at its path with its mode (or
 *     default_mode); a key the object does not have is an error unless the
 *     source is optional, in which case it is left out;
 *   - every path is checked with atomic_payload_validate_path() (kubelet's
 *     validatePath in the AtomicWriter): a bad one is an error whatever
 *     "optional" says.
 * The result is sorted by path with duplicates dropped (the last wins, as in
 * kubelet's map), so that two payloads of the same content compare and
 * digest alike. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "k8s/objects.h"
#include "volume/host/atomicwriter.h"

#define KEY_PAYLOAD_DIGEST_SIZE 32

/* The data of the object, whichever kind it is: text keys (configMap data),
 * byte keys (configMap binaryData, secret data).  All may be empty (an
 * optional object that does not exist). */
typedef struct KeySource {
        const K8sStringMap *text;
        const K8sSecretEntry *bytes;
        size_t n_bytes;
        const char *kind; /* "configmap" or "secret": kubelet's message "<kind> references non-existent <kind> key" */
} KeySource;

/* Appends the files of proj (items, optional) over src to *payload with
 * default_mode where an item has none (the caller passes the volume's
 * defaultMode, or the projected volume's for a projection whose own is 0).
 * 0; -ENOENT for a key missing (not optional), -EINVAL for a bad path,
 * both with *ret_error (allocated) saying what is wrong (kubelet's words
 * where it has them); -ENOMEM. */
int key_projection_append(const K8sKeyProjection *proj, const KeySource *src, mode_t default_mode,
                          AtomicPayload *payload, char **ret_error);

/* Sorts by path and drops all but the last of each path.  0 or -ENOMEM. */
int key_payload_normalize(AtomicPayload *payload);

/* SHA-256 over the normalized payload: paths, modes, owners and bytes. */
int key_payload_digest(const AtomicPayload *payload, uint8_t ret[static KEY_PAYLOAD_DIGEST_SIZE]);

/* Wipes the bytes of every file (explicit_bzero) and frees the payload: for
 * a secret's, whose values must not linger in freed memory. */
void key_payload_wipe(AtomicPayload *payload);

static inline KeySource key_source_configmap(const K8sConfigMap *c) {
        return c ? (KeySource){ .text = &c->data, .bytes = c->binary_data, .n_bytes = c->n_binary_data, .kind = "configmap" }
                 : (KeySource){ .kind = "configmap" };
}

static inline KeySource key_source_secret(const K8sSecret *s) {
        return s ? (KeySource){ .bytes = s->data, .n_bytes = s->n_data, .kind = "secret" } : (KeySource){ .kind = "secret" };
}
