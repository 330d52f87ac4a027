/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The serviceAccountToken source of a projected volume (kubelet's
 * pkg/kubelet/token/token_manager.go and projected.go, kubelet-facts §15):
 * a TokenRequest for the pod's service account, bound to the pod
 * (boundObjectRef Pod name + uid), with the source's audience (none: the
 * API server's) and expirationSeconds.  Node-wide cache keyed as kubelet's
 * (pod uid, audience, expirationSeconds); one request in flight per key,
 * whoever waits for it.
 *
 * Refresh: kubelet renews a token once it is older than 80 % of its lifetime
 * or 24 h, less up to 10 s of jitter.  10 s is too little: 1,000 pods
 * started by a node's boot (or a deployment) would renew within the same
 * ten seconds, every hour.  Here the refresh time is drawn once per token,
 * uniformly within TOKEN_REFRESH_SPREAD (a fifth) of its refresh age before
 * that point: a 3,607 s token is renewed between 48 % and 80 % of its
 * lifetime (1,000 tokens issued in the same second: under one renewal a
 * second on average), see token_refresh_at(); every renewal draws anew, so
 * a burst keeps spreading out, and never later than kubelet would.
 *
 * A token is a credential: never logged, never traced, wiped from memory
 * (explicit_bzero) when replaced or dropped; only its times are reported. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "k8s/client.h"

/* The share of the refresh age (min(80 % of the lifetime, 24 h)) within
 * which the refresh time is drawn, before that age. */
#define TOKEN_REFRESH_SPREAD 0.4
#define TOKEN_MAX_TTL_USEC (24 * USEC_PER_HOUR)

/* When a token issued at "issued" (realtime usec; the moment the request was
 * sent, never later than the API server's iat) and expiring at "expires" is
 * due for renewal: issued + age - age * SPREAD * random01, where age =
 * min(80 % of its lifetime, 24 h).  random01 in [0, 1).  The test hook
 * KVOLUMED_TEST_TOKEN_CLOCK_SCALE=N divides the wait by N (a test with the
 * API's 600 s minimum then sees renewals in seconds). */
uint64_t token_refresh_at(uint64_t issued, uint64_t expires, double random01);

typedef struct TokenCache TokenCache;

TokenCache *token_cache_new(K8sClient *client);
TokenCache *token_cache_free(TokenCache *c);

typedef struct TokenRequestArgs {
        const char *namespace;
        const char *service_account; /* NULL or "": "default", as admission sets it */
        const char *pod_name;
        const char *pod_uid;
        const char *audience; /* NULL or "": the API server's */
        int64_t expiration_seconds;
} TokenRequestArgs;

/* The cached token for args, valid now (realtime usec) and not due: *ret
 * points into the cache (valid until the next request or forget), with its
 * length; -ENOENT when there is none, it expired or it is due for refresh. */
int token_cache_get(TokenCache *c, const TokenRequestArgs *args, uint64_t now_realtime, const char **ret,
                    size_t *ret_size);

/* When the cached token for args is due for renewal (realtime usec), or 0:
 * none cached (a request is due now). */
uint64_t token_cache_refresh_at(TokenCache *c, const TokenRequestArgs *args);

/* Asks the API server for a token for args; done is called once, from the
 * loop, with 0, or -errno and the API server's message (a 403/404 refusal:
 * -EACCES / -ENOENT).  A request for the same key already in flight is
 * shared.  *ret_waiter (optional) lets the caller stop waiting
 * (token_waiter_cancel) without cancelling the request for others. */
typedef void (*token_done_t)(int error, const char *message, void *userdata);
typedef struct TokenWaiter TokenWaiter;
int token_cache_request(TokenCache *c, const TokenRequestArgs *args, token_done_t done, void *userdata,
                        TokenWaiter **ret_waiter);
void token_waiter_cancel(TokenWaiter *w);

/* The pod is gone: its tokens wiped and forgotten (kubelet's
 * DeleteServiceAccountToken after the volume's teardown). */
void token_cache_forget_pod(TokenCache *c, const char *pod_uid);

/* A token found on disk after a restart, issued at "issued" (realtime
 * usec) for args' expirationSeconds: cached unless one is already. */
int token_cache_seed(TokenCache *c, const TokenRequestArgs *args, const char *token, size_t size, uint64_t issued);

/* Number of tokens cached, for tests. */
size_t token_cache_size(const TokenCache *c);
