/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The clusterTrustBundle source of a projected volume (KEP-3257; kubelet's
 * pkg/kubelet/clustertrustbundle): the trust anchors of one bundle by name,
 * or of every bundle of a signer whose labels match the selector, as one
 * PEM file: every CERTIFICATE block of them, each once (kubelet dedupes by
 * the DER bytes), encoded as Go's pem.EncodeToMemory does (64-column
 * base64).  kubelet shuffles the order once per kubelet start; kvolumed
 * sorts it by the DER bytes instead, so that a restart rewrites nothing.
 *
 * Read with a LIST of certificates.k8s.io clustertrustbundles (v1beta1, else
 * v1alpha1; the Node authorizer lets a node list them), filtered by name or
 * signerName here and by labelSelector on the server.  Neither version
 * served (a 404 for both): "clusterTrustBundles are not served by the API
 * server", an error whether or not the source is optional (kubelet's
 * manager errs without the API too).  Nothing matching: an empty file when
 * optional, else kubelet's error. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "k8s/client.h"

#define TRUSTBUNDLE_NOT_SERVED "clusterTrustBundles are not served by the API server"

/* pem: allocated (the callee frees it), NULL on failure. */
typedef void (*trustbundle_done_t)(int error, const char *message, uint8_t *pem, size_t size, void *userdata);

/* name, or signer with has_selector/selector (has_selector false: the
 * source matches nothing).  done is called once, from the loop. */
int trustbundle_fetch(K8sClient *c, const char *name, const char *signer, bool has_selector, const char *selector,
                      bool optional, trustbundle_done_t done, void *userdata);

/* The PEM file of the bundles' texts (pure; for tests): every CERTIFICATE
 * block once, sorted by DER bytes.  -EINVAL for a block that is not base64. */
int trustbundle_merge(const char *const *bundles, size_t n, char **ret, size_t *ret_size);
