/* SPDX-License-Identifier: Apache-2.0 */
/* Pod-bound service account tokens of projected volumes (see token.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "k8s/backoff.h"
#include "k8s/writers.h"
#include "systemd/hashmap.h"
#include "systemd/log.h"
#include "systemd/testhook.h"
#include "systemd/trace.h"
#include "volume/internal.h"
#include "volume/kinds/projected/token.h"

struct TokenWaiter {
        struct TokenEntry *entry;
        token_done_t done;
        void *userdata;
        TokenWaiter *next;
};

typedef struct TokenEntry {
        TokenCache *cache;
        char *key;     /* "<pod uid>\n<audience>\n<expirationSeconds>" */
        char *pod_uid;
        char *token;   /* NULL: none yet; wiped when replaced or dropped */
        size_t size;
        uint64_t issued, expires, refresh_at; /* realtime usec */
        K8sRequest *request;                  /* in flight */
        uint64_t request_sent;
        int64_t expiration_seconds; /* asked for */
        TokenWaiter *waiters;
} TokenEntry;

struct TokenCache {
        K8sClient *client;
        Hashmap *entries; /* key → TokenEntry */
};

static uint64_t realtime_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

uint64_t token_refresh_at(uint64_t issued, uint64_t expires, double random01) {
        uint64_t lifetime = expires > issued ? expires - issued : 0;
        uint64_t age = MIN(lifetime / 10 * 8, TOKEN_MAX_TTL_USEC);
        unsigned long scale = test_hook_ulong("TOKEN_CLOCK_SCALE", 1);

        if (random01 < 0 || random01 >= 1)
                random01 = 0;
        age -= (uint64_t) ((double) age * TOKEN_REFRESH_SPREAD * random01);
        return issued + age / scale;
}

static void wipe_token(TokenEntry *e) {
        if (e->token)
                explicit_bzero(e->token, e->size);
        e->token = mfree_str(e->token);
        e->size = 0;
}

static void entry_notify(TokenEntry *e, int error, const char *message) {
        TokenWaiter *w = e->waiters;

        e->waiters = NULL;
        while (w) {
                TokenWaiter *next = w->next;
                token_done_t done = w->done;
                void *userdata = w->userdata;
                free(w);
                done(error, message, userdata);
                w = next;
        }
}

static void entry_free(TokenEntry *e) {
        if (!e)
                return;
        k8s_request_cancel(e->request);
        /* Waiters of a dropped entry (the manager is being freed, the pod's
         * volumes are gone) are dropped with it: their operations are. */
        while (e->waiters) {
                TokenWaiter *w = e->waiters;
                e->waiters = w->next;
                free(w);
        }
        wipe_token(e);
        free(e->key);
        free(e->pod_uid);
        free(e);
}

static char *key_of(const TokenRequestArgs *a) {
        char *k = NULL;
        if (asprintf(&k, "%s\n%s\n%" PRIi64, strempty(a->pod_uid), strempty(a->audience), a->expiration_seconds) < 0)
                return NULL;
        return k;
}

TokenCache *token_cache_new(K8sClient *client) {
        TokenCache *c = calloc(1, sizeof *c);
        if (!c)
                return NULL;
        c->client = client;
        c->entries = hashmap_new();
        if (!c->entries) {
                free(c);
                return NULL;
        }
        return c;
}

TokenCache *token_cache_free(TokenCache *c) {
        void *v;
        if (!c)
                return NULL;
        for (size_t i = 0; hashmap_iterate(c->entries, &i, NULL, &v);)
                entry_free(v);
        hashmap_free(c->entries);
        free(c);
        return NULL;
}

static TokenEntry *lookup(TokenCache *c, const TokenRequestArgs *a) {
        _cleanup_free_ char *k = key_of(a);
        return k ? hashmap_get(c->entries, k) : NULL;
}

int token_cache_get(TokenCache *c, const TokenRequestArgs *args, uint64_t now_realtime, const char **ret,
                    size_t *ret_size) {
        TokenEntry *e = lookup(c, args);

        if (!e || !e->token || now_realtime >= e->refresh_at || now_realtime >= e->expires)
                return -ENOENT;
        *ret = e->token;
        *ret_size = e->size;
        return 0;
}

uint64_t token_cache_refresh_at(TokenCache *c, const TokenRequestArgs *args) {
        TokenEntry *e = lookup(c, args);
        return e && e->token ? e->refresh_at : 0;
}

/* TEST ONLY (trace.h): the renewal time drawn, "token-refresh-due", beside
 * "token-issued": a test reads the spread kvolumed chose rather than the
 * requests' arrival times, which a busy machine bunches up.  Times only. */
static void trace_schedule(const TokenEntry *e) {
        if (test_trace_now() == 0)
                return;
        test_trace_at(e->issued, "token-issued", e->pod_uid);
        test_trace_at(e->refresh_at, "token-refresh-due", e->pod_uid);
}

static void on_token(K8sClient *client, int error, const char *message, char *token, char *expiration,
                     void *userdata) {
        TokenEntry *e = userdata;
        time_t exp = 0;

        e->request = NULL;
        if (error >= 0 && (!token || !*token || tokens_parse_rfc3339(expiration, &exp) < 0 || exp <= 0)) {
                error = -EBADMSG;
                message = "the API server's TokenRequest answer has no token or no valid expirationTimestamp";
        }
        if (error < 0) {
                /* The old token, still valid, stays: a failed renewal is retried
                 * and the pod keeps what it has (kubelet does the same). */
                erase_and_free(token);
                free(expiration);
                entry_notify(e, error, message ?: "TokenRequest failed");
                return;
        }
        wipe_token(e);
        e->token = token;
        e->size = strlen(token);
        e->expires = (uint64_t) exp * USEC_PER_SEC;
        /* kubelet's iat is the expiry less the lifetime asked for
         * (token_manager.go requiresRefresh), not when the request left:
         * an answer that took long must not move the renewal past
         * kubelet's point.  Whichever is earlier. */
        e->issued = e->request_sent;
        if (e->expiration_seconds > 0 && e->expires > (uint64_t) e->expiration_seconds * USEC_PER_SEC)
                e->issued = MIN(e->issued, e->expires - (uint64_t) e->expiration_seconds * USEC_PER_SEC);
        e->refresh_at = token_refresh_at(e->issued, e->expires, k8s_random01());
        free(expiration);
        trace_schedule(e);
        entry_notify(e, 0, NULL);
}

/* The cache's entry for args, a new one (no token, no request) if it had
 * none. */
static TokenEntry *entry_get_or_new(TokenCache *c, const TokenRequestArgs *args) {
        TokenEntry *e = lookup(c, args);

        if (e)
                return e;
        e = calloc(1, sizeof *e);
        if (!e)
                return NULL;
        e->cache = c;
        e->key = key_of(args);
        e->pod_uid = strdup(strempty(args->pod_uid));
        e->expiration_seconds = args->expiration_seconds;
        if (!e->key || !e->pod_uid || hashmap_put(c->entries, e->key, e, NULL) < 0) {
                entry_free(e);
                return NULL;
        }
        return e;
}

int token_cache_request(TokenCache *c, const TokenRequestArgs *args, token_done_t done, void *userdata,
                        TokenWaiter **ret_waiter) {
        TokenEntry *e = entry_get_or_new(c, args);
        TokenWaiter *w;
        int r;

        if (!e)
                return -ENOMEM;
        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (TokenWaiter){ .entry = e, .done = done, .userdata = userdata, .next = e->waiters };
        if (!e->request) {
                e->request_sent = realtime_usec();
                r = k8s_request_token(c->client, args->namespace,
                                      isempty(args->service_account) ? "default" : args->service_account,
                                      isempty(args->audience) ? NULL : args->audience, args->expiration_seconds,
                                      args->pod_name, args->pod_uid, on_token, e, &e->request);
                if (r < 0) {
                        free(w);
                        return r;
                }
        }
        e->waiters = w;
        if (ret_waiter)
                *ret_waiter = w;
        return 0;
}

void token_waiter_cancel(TokenWaiter *w) {
        TokenWaiter **p;
        if (!w)
                return;
        for (p = &w->entry->waiters; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        free(w);
                        return;
                }
}

void token_cache_forget_pod(TokenCache *c, const char *pod_uid) {
        void *v;
        const char *k;

        if (!c)
                return;
        for (size_t i = 0; hashmap_iterate(c->entries, &i, &k, &v);) {
                TokenEntry *e = v;
                if (!streq(e->pod_uid, pod_uid))
                        continue;
                (void) hashmap_remove(c->entries, k);
                /* A publish of another of the pod's volumes still waiting
                 * hears of it (and is retried) rather than hanging. */
                k8s_request_cancel(TAKE_PTR(e->request));
                entry_notify(e, -ECANCELED, "the pod's tokens were dropped with its last projected volume");
                entry_free(e);
        }
}

int token_cache_seed(TokenCache *c, const TokenRequestArgs *args, const char *token, size_t size, uint64_t issued) {
        TokenEntry *e = lookup(c, args);

        if (e && e->token)
                return 0;
        if (!e && !(e = entry_get_or_new(c, args)))
                return -ENOMEM;
        e->token = strndup(token, size);
        if (!e->token)
                return -ENOMEM;
        e->size = strlen(e->token);
        e->issued = issued;
        e->expires = issued + (uint64_t) MAX(args->expiration_seconds, 0) * USEC_PER_SEC;
        e->refresh_at = token_refresh_at(e->issued, e->expires, k8s_random01());
        trace_schedule(e);
        return 0;
}

size_t token_cache_size(const TokenCache *c) {
        return c ? hashmap_size(c->entries) : 0;
}
