/* SPDX-License-Identifier: Apache-2.0 */
/* Service account tokens for a CSI driver's tokenRequests (CSIDriver.spec,
 * kubelet-facts §4): one TokenRequest per entry for the pod's service
 * account, bound to the pod (NodeRestriction insists, §14), passed to
 * NodePublishVolume under csi.storage.k8s.io/serviceAccount.tokens in the
 * JSON kubelet marshals.  Tokens are credentials: they are never logged,
 * never written to disk, and wiped from memory as soon as the call that
 * carries them was encoded; only their expiry times are kept, for the
 * republish schedule. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "k8s/writers.h"
#include "systemd/log.h"
#include "volume/internal.h"
#include "volume/kinds/csi/kind.h"

typedef struct TokenResult {
        OpTokens *set;
        char *audience;
        int64_t expiration_seconds; /* <= 0: the server's default */
        char *token;                /* NULL once wiped */
        char *expiration;           /* RFC 3339, UTC, as Go's metav1.Time marshals it */
        uint64_t issued_realtime;   /* CLOCK_REALTIME, usec */
        uint64_t expires_realtime;
        K8sRequest *request;        /* in flight */
} TokenResult;

struct OpTokens {
        Operation *op;
        tokens_done_t done;
        TokenResult *items;
        size_t n, pending;
        int error;
        char *message;
};

void erase_and_free(char *s) {
        if (!s)
                return;
        explicit_bzero(s, strlen(s));
        free(s);
}

static uint64_t realtime_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* RFC 3339 ("2024-05-01T10:00:00Z", "...T10:00:00.5+02:00") to seconds since the epoch. */
int tokens_parse_rfc3339(const char *s, time_t *ret) {
        struct tm tm = {};
        int year, mon, day, hour, min, sec, consumed = 0, oh = 0, om = 0;
        const char *p;
        time_t t;

        if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &mon, &day, &hour, &min, &sec, &consumed) != 6 ||
            consumed != 19)
                return -EINVAL;
        p = s + consumed;
        if (*p == '.')
                for (p++; *p >= '0' && *p <= '9'; p++)
                        ;
        if (*p == 'Z' || *p == 'z')
                p++;
        else if (*p == '+' || *p == '-') {
                int sign = *p == '-' ? -1 : 1, n = 0;
                if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5)
                        return -EINVAL;
                oh *= sign;
                om *= sign;
                p += 1 + n;
        } else
                return -EINVAL;
        if (*p != '\0' || mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60)
                return -EINVAL;
        tm = (struct tm){ .tm_year = year - 1900, .tm_mon = mon - 1, .tm_mday = day, .tm_hour = hour,
                          .tm_min = min, .tm_sec = sec };
        t = timegm(&tm);
        if (t == (time_t) -1)
                return -EINVAL;
        *ret = t - (time_t) oh * 3600 - (time_t) om * 60;
        return 0;
}

/* Appends "s" to "out" (when not NULL) as Go's encoding/json writes a
 * string, HTML-safe escapes included; returns the length it takes. */
static size_t json_string(char *out, const char *s) {
        size_t n = 0;

#define PUT(str, len)                                      \
        do {                                               \
                if (out)                                   \
                        memcpy(out + n, (str), (len));     \
                n += (len);                                \
        } while (0)
        PUT("\"", 1);
        for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
                char esc[8];
                if (*p == '"' || *p == '\\') {
                        esc[0] = '\\';
                        esc[1] = (char) *p;
                        PUT(esc, 2);
                } else if (*p == '\n')
                        PUT("\\n", 2);
                else if (*p == '\r')
                        PUT("\\r", 2);
                else if (*p == '\t')
                        PUT("\\t", 2);
                else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&') {
                        snprintf(esc, sizeof esc, "\\u%04x", *p);
                        PUT(esc, 6);
                } else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
                        PUT(p[2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
                        p += 2;
                } else
                        PUT(p, 1);
        }
        PUT("\"", 1);
#undef PUT
        return n;
}

static int cmp_result(const void *a, const void *b) {
        return strcmp((*(TokenResult *const *) a)->audience, (*(TokenResult *const *) b)->audience);
}

/* Writes the JSON into "out" (when not NULL); returns its length. */
static size_t tokens_json(char *out, TokenResult *const *sorted, size_t n) {
        static const char mid1[] = ":{\"token\":", mid2[] = ",\"expirationTimestamp\":";
        size_t len = 0;

#define PUT(str, l)                                        \
        do {                                               \
                if (out)                                   \
                        memcpy(out + len, (str), (l));     \
                len += (l);                                \
        } while (0)
        PUT("{", 1);
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        PUT(",", 1);
                len += json_string(out ? out + len : NULL, sorted[i]->audience);
                PUT(mid1, sizeof mid1 - 1);
                len += json_string(out ? out + len : NULL, sorted[i]->token);
                PUT(mid2, sizeof mid2 - 1);
                len += json_string(out ? out + len : NULL, sorted[i]->expiration);
                PUT("}", 1);
        }
        PUT("}", 1);
#undef PUT
        return len;
}

int tokens_format(const OpTokens *t, char **ret) {
        _cleanup_free_ TokenResult **sorted = NULL;
        size_t n = 0, len;
        char *buf;

        if (!t || t->n == 0)
                return -EINVAL;
        sorted = calloc(t->n, sizeof *sorted);
        if (!sorted)
                return -ENOMEM;
        for (size_t i = 0; i < t->n; i++) {
                bool replaced = false;
                if (!t->items[i].token || !t->items[i].expiration)
                        return -ESTALE; /* wiped already: a call carries its tokens once */
                /* A Go map keeps the last value of a repeated audience. */
                for (size_t k = 0; k < n && !replaced; k++)
                        if (streq(sorted[k]->audience, t->items[i].audience)) {
                                sorted[k] = &t->items[i];
                                replaced = true;
                        }
                if (!replaced)
                        sorted[n++] = &t->items[i];
        }
        /* Go marshals a map with its keys sorted. */
        qsort(sorted, n, sizeof *sorted, cmp_result);
        /* Sized first, written once: no reallocation leaves a copy behind unwiped. */
        len = tokens_json(NULL, sorted, n);
        buf = malloc(len + 1);
        if (!buf)
                return -ENOMEM;
        (void) tokens_json(buf, sorted, n);
        buf[len] = '\0';
        *ret = buf;
        return 0;
}

void tokens_wipe(OpTokens *t) {
        for (size_t i = 0; t && i < t->n; i++) {
                erase_and_free(t->items[i].token);
                t->items[i].token = NULL;
        }
}

OpTokens *tokens_free(OpTokens *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n; i++) {
                TokenResult *item = &t->items[i];
                /* Cancelled requests do not call back; the destroy hook frees their state. */
                k8s_request_cancel(item->request);
                erase_and_free(item->token);
                free(item->audience);
                free(item->expiration);
        }
        free(t->items);
        free(t->message);
        free(t);
        return NULL;
}

uint64_t tokens_refresh_due_realtime(const OpTokens *t, double random01) {
        uint64_t due = UINT64_MAX;

        for (size_t i = 0; t && i < t->n; i++) {
                const TokenResult *item = &t->items[i];
                uint64_t lifetime, margin;
                if (item->expires_realtime == 0)
                        continue;
                lifetime = item->expires_realtime > item->issued_realtime
                                   ? item->expires_realtime - item->issued_realtime
                                   : 0;
                /* Within 20 % of its lifetime of expiring, and a little more at
                 * random: pods given tokens together do not republish together. */
                margin = (uint64_t) ((double) lifetime * (0.20 + 0.05 * random01));
                due = MIN(due, item->expires_realtime - MIN(margin, item->expires_realtime));
        }
        return due;
}

/* Admission gives every pod one; a pod object that somehow lacks it uses
 * "default", as the admission would have set it. */
static const char *tokens_service_account(const Operation *op) {
        return isempty(op->pod.service_account) ? "default" : op->pod.service_account;
}

static void token_finished(OpTokens *t) {
        if (--t->pending > 0)
                return;
        t->done(t->op, t->error, t->message);
}

static void on_token(K8sClient *c, int error, const char *message, char *token, char *expiration, void *userdata) {
        TokenResult *item = userdata;
        OpTokens *t = item->set;
        const Operation *op = t->op;
        LogFields f = { .pod_uid = op->pod.uid, .pod = op->pod.key, .volume = op->spec_name,
                        .driver = op->av->driver, .volume_handle = op->av->handle };
        time_t expires;
        char buf[64];
        struct tm tm;

        item->request = NULL;
        if (error >= 0 && tokens_parse_rfc3339(expiration, &expires) < 0) {
                error = -EBADMSG;
                message = "the TokenRequest's status.expirationTimestamp is not RFC 3339";
        }
        if (error < 0) {
                erase_and_free(token);
                free(expiration);
                if (t->error >= 0) {
                        t->error = error;
                        free(t->message);
                        if (asprintf(&t->message, "kubernetes.io/csi: mounter.SetUpAt failed to get service "
                                     "account token attributes: failed to fetch token for audience \"%s\": %s",
                                     item->audience, strempty(message)) < 0)
                                t->message = NULL;
                }
                token_finished(t);
                return;
        }
        item->token = token;
        item->issued_realtime = realtime_usec();
        item->expires_realtime = expires > 0 ? (uint64_t) expires * USEC_PER_SEC : 0;
        free(expiration);
        /* As Go's metav1.Time marshals: RFC 3339 in UTC, whole seconds. */
        if (!gmtime_r(&expires, &tm) || strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 ||
            !(item->expiration = strdup(buf))) {
                erase_and_free(item->token);
                item->token = NULL;
                if (t->error >= 0)
                        t->error = -ENOMEM;
        } else
                /* The audience and expiry only: the token itself never. */
                log_fields(LOG_DEBUG, &f, "Got a service account token of %s/%s for audience \"%s\", expiring %s",
                           op->pod.namespace, tokens_service_account(op), item->audience, item->expiration);
        token_finished(t);
}

int tokens_request(Operation *op, tokens_done_t done) {
        const K8sCSIDriver *d = csi_driver_object(op->m, op->av->driver);
        OpTokens *t;
        int r = 0;

        op->tokens = tokens_free(op->tokens);
        if (!d || d->n_token_requests == 0)
                return 0;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->items = calloc(d->n_token_requests, sizeof *t->items);
        if (!t->items) {
                free(t);
                return -ENOMEM;
        }
        t->op = op;
        t->done = done;
        op->tokens = t;
        for (size_t i = 0; i < d->n_token_requests; i++) {
                TokenResult *item = &t->items[t->n];
                item->set = t;
                item->expiration_seconds =
                        d->token_requests[i].has_expiration_seconds ? d->token_requests[i].expiration_seconds : 0;
                item->audience = strdup(strempty(d->token_requests[i].audience));
                if (!item->audience) {
                        r = -ENOMEM;
                        break;
                }
                t->n++;
        }
        for (size_t i = 0; r >= 0 && i < t->n; i++) {
                TokenResult *item = &t->items[i];
                r = k8s_request_token(op->m->k8s, op->pod.namespace, tokens_service_account(op), item->audience,
                                      item->expiration_seconds, op->pod.name, op->pod.uid, on_token, item,
                                      &item->request);
                if (r >= 0)
                        t->pending++;
        }
        if (r < 0) {
                /* Nothing of it will call back: the operation fails now. */
                op->tokens = tokens_free(t);
                return r;
        }
        return 1;
}
