/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Who the API server says kvolumed is: a SelfSubjectReview
 * (authentication.k8s.io), the one request that answers it without any
 * permission beyond being authenticated.  GA (v1) since Kubernetes 1.28,
 * v1beta1 (on by default) in 1.27; v1alpha1 (1.26) sat behind a feature gate
 * that clusters leave off, so it is not asked.  An older server answers 404
 * to both: the identity is then unknown, which is not an error. */

#include "k8s/client.h"

typedef enum K8sIdentityResult {
        K8S_IDENTITY_KNOWN,       /* user (and groups) filled */
        K8S_IDENTITY_UNSUPPORTED, /* the server does not serve SelfSubjectReview */
        K8S_IDENTITY_FAILED,      /* transport, TLS, 401, ...: message says what */
} K8sIdentityResult;

typedef struct K8sIdentity {
        K8sIdentityResult result;
        char *user;
        char **groups;       /* NULL-terminated, may be NULL */
        int error;           /* FAILED: -errno of the transport, or 0 when the server answered */
        long status;         /* the HTTP status of the last answer, 0 when none */
        const char *message; /* FAILED: why, naming the server (from the client) */
} K8sIdentity;

/* Called once with the outcome; "id" lives until the callback returns. */
typedef void (*k8s_identity_t)(K8sClient *c, const K8sIdentity *id, void *userdata);

/* Asks v1, then v1beta1 when v1 is not served.  Cancel with
 * k8s_identity_request_cancel(); the callback is then not called. */
typedef struct K8sIdentityRequest K8sIdentityRequest;
int k8s_identity_request(K8sClient *c, k8s_identity_t done, void *userdata, K8sIdentityRequest **ret);
void k8s_identity_request_cancel(K8sIdentityRequest *q);

/* The SelfSubjectReview answer's status.userInfo into id->user and
 * id->groups (result K8S_IDENTITY_KNOWN); -EBADMSG when it has no user name.
 * Free with k8s_identity_done(). */
int k8s_identity_decode(const char *body, size_t size, K8sIdentity *id);
void k8s_identity_done(K8sIdentity *id);

/* The node's name when the identity is a node's, as the Node authorizer
 * reads it (user system:node:NAME in group system:nodes); NULL otherwise. */
const char *k8s_identity_node_name(const K8sIdentity *id);

/* "USER (groups A, B)" for log lines; malloc'd. */
char *k8s_identity_to_string(const K8sIdentity *id);
