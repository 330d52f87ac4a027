/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The volume tests' objects, from JSON as the API server sends them. */

#include "k8s/objects.h"

static inline void *decode(const K8sKind *kind, const char *json) {
        void *obj = NULL;
        K8sDecodeError e = {};
        int r = k8s_object_decode(kind, json, strlen(json), &obj, &e);
        if (r < 0)
                fail_msg("decode failed at %s: %s", e.field, e.problem);
        return obj;
}
