/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "k8s/identity.h"
#include "k8s/json.h"
#include "systemd/validate.h"

#define NODE_USER_PREFIX "system:node:"
#define NODES_GROUP "system:nodes"

static const char *const versions[] = { "v1", "v1beta1" };

struct K8sIdentityRequest {
        K8sClient *client;
        K8sRequest *request;
        size_t version; /* index into versions[] */
        k8s_identity_t done;
        void *userdata;
};

static int send_review(K8sIdentityRequest *q);

static void request_destroy(void *userdata) {
        /* Cancelled (also by k8s_client_free): the caller hears nothing. */
        free(userdata);
}

int k8s_identity_decode(const char *body, size_t size, K8sIdentity *id) {
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        const cJSON *status, *user_info;
        K8sDecodeError error = {};
        JsonPath p;
        int r;

        j = cJSON_ParseWithLength(body, size);
        if (!j)
                return -EBADMSG;
        k8s_json_path_init(&p, &error);
        r = k8s_json_get_object(&p, j, "status", JSON_REQUIRED, &status);
        if (r >= 0)
                r = k8s_json_get_object(&p, status, "userInfo", JSON_REQUIRED, &user_info);
        if (r >= 0)
                r = k8s_json_get_string(&p, user_info, "username", JSON_REQUIRED, &id->user);
        if (r >= 0)
                r = k8s_json_get_strv(&p, user_info, "groups", &id->groups);
        if (r < 0) {
                k8s_identity_done(id);
                return r;
        }
        id->result = K8S_IDENTITY_KNOWN;
        return 0;
}

void k8s_identity_done(K8sIdentity *id) {
        id->user = mfree_str(id->user);
        id->groups = strv_free(id->groups);
}

static void on_review(K8sClient *c, const K8sResponse *resp, void *userdata) {
        K8sIdentityRequest *q = userdata;
        K8sIdentity id = { .result = K8S_IDENTITY_FAILED, .error = resp->error, .status = resp->status,
                           .message = resp->message };

        q->request = NULL;
        if (resp->error == 0 && resp->status == 404 && q->version + 1 < ELEMENTSOF(versions)) {
                q->version++;
                if (send_review(q) >= 0)
                        return;
        }
        if (resp->error == 0 && resp->status == 404)
                id.result = K8S_IDENTITY_UNSUPPORTED;
        else if (resp->error == 0 && (resp->status == 200 || resp->status == 201)) {
                if (k8s_identity_decode(resp->body, resp->size, &id) < 0)
                        id.message = "the API server's SelfSubjectReview answer has no status.userInfo.username";
        }
        q->done(c, &id, q->userdata);
        k8s_identity_done(&id);
        free(q);
}

static int send_review(K8sIdentityRequest *q) {
        char path[128], body[160];
        int r;

        snprintf(path, sizeof path, "/apis/authentication.k8s.io/%s/selfsubjectreviews", versions[q->version]);
        snprintf(body, sizeof body, "{\"apiVersion\":\"authentication.k8s.io/%s\",\"kind\":\"SelfSubjectReview\"}",
                 versions[q->version]);
        r = k8s_client_request(q->client, "POST", path, "application/json", body, on_review, q, &q->request);
        if (r < 0)
                return r;
        k8s_request_set_destroy(q->request, request_destroy);
        return 0;
}

int k8s_identity_request(K8sClient *c, k8s_identity_t done, void *userdata, K8sIdentityRequest **ret) {
        K8sIdentityRequest *q = calloc(1, sizeof *q);
        int r;

        if (!q)
                return -ENOMEM;
        *q = (K8sIdentityRequest){ .client = c, .done = done, .userdata = userdata };
        r = send_review(q);
        if (r < 0) {
                free(q);
                return r;
        }
        if (ret)
                *ret = q;
        return 0;
}

void k8s_identity_request_cancel(K8sIdentityRequest *q) {
        /* The request's destroy hook frees q. */
        if (q && q->request)
                k8s_request_cancel(q->request);
}

const char *k8s_identity_node_name(const K8sIdentity *id) {
        if (id->result != K8S_IDENTITY_KNOWN || !id->user || strncmp(id->user, NODE_USER_PREFIX,
                                                                     strlen(NODE_USER_PREFIX)) != 0)
                return NULL;
        if (!strv_contains(id->groups, NODES_GROUP))
                return NULL;
        return id->user + strlen(NODE_USER_PREFIX);
}

static void fput_escaped(const char *s, FILE *f) {
        _cleanup_free_ char *e = escape_untrusted(s);
        fputs(e ? e : "(out of memory)", f);
}

char *k8s_identity_to_string(const K8sIdentity *id) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return NULL;
        /* Names the API server chose, for a terminal or a log line: one
         * with a newline or an escape sequence must not fake a line. */
        fput_escaped(strempty(id->user), f);
        for (size_t i = 0; id->groups && id->groups[i]; i++) {
                fputs(i == 0 ? " (groups " : ", ", f);
                fput_escaped(id->groups[i], f);
        }
        if (id->groups && id->groups[0])
                fputc(')', f);
        if (fclose(f) != 0)
                return mfree_str(text);
        return text;
}
