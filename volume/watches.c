/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "systemd/hashmap.h"
#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/watches.h"

typedef struct Watch {
        K8sInformer *informer;
        bool marked;
} Watch;

struct ObjectWatches {
        K8sClient *client;
        Hashmap *watches; /* "Kind/namespace/name" → Watch */
        object_watches_changed_t changed;
        void *userdata;
};

static void notify(K8sInformer *i, void *userdata) {
        ObjectWatches *w = userdata;
        w->changed(w->userdata);
}
static void on_add(K8sInformer *i, const void *obj, void *userdata) {
        notify(i, userdata);
}
static void on_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        notify(i, userdata);
}
static void on_delete(K8sInformer *i, const void *old, void *userdata) {
        notify(i, userdata);
}

static const K8sInformerHandlers handlers = {
        .on_add = on_add,
        .on_update = on_update,
        .on_delete = on_delete,
        /* The first list also answers "does not exist": a pass must run then. */
        .on_synced = notify,
};

int object_watches_new(K8sClient *client, object_watches_changed_t changed, void *userdata, ObjectWatches **ret) {
        ObjectWatches *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->watches = hashmap_new();
        if (!w->watches) {
                free(w);
                return -ENOMEM;
        }
        w->client = client;
        w->changed = changed;
        w->userdata = userdata;
        *ret = w;
        return 0;
}

static void watch_free(Watch *watch) {
        k8s_informer_free(watch->informer);
        free(watch);
}

ObjectWatches *object_watches_free(ObjectWatches *w) {
        const char *key;
        void *value;

        if (!w)
                return NULL;
        for (size_t i = 0; hashmap_iterate(w->watches, &i, &key, &value);)
                watch_free(value);
        hashmap_free(w->watches);
        free(w);
        return NULL;
}

void object_watches_begin(ObjectWatches *w) {
        void *value;
        for (size_t i = 0; hashmap_iterate(w->watches, &i, NULL, &value);)
                ((Watch *) value)->marked = false;
}

void object_watches_sweep(ObjectWatches *w) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(w->watches, &i, &key, &value);) {
                Watch *watch = value;
                if (watch->marked)
                        continue;
                log_debug("No longer watching %s", key);
                hashmap_remove(w->watches, key);
                watch_free(watch);
        }
}

size_t object_watches_count(ObjectWatches *w) {
        return hashmap_size(w->watches);
}

static int start_watch(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name,
                       const char *key, Watch **ret) {
        _cleanup_free_ char *selector = NULL;
        Watch *watch;
        int r;

        /* Names go into a query; only well-formed ones are asked for. */
        if (validate_dns1123_subdomain(name) < 0 || (namespace && validate_dns1123_label(namespace) < 0))
                return -EINVAL;
        if (asprintf(&selector, "metadata.name=%s", name) < 0)
                return -ENOMEM;
        watch = calloc(1, sizeof *watch);
        if (!watch)
                return -ENOMEM;
        r = k8s_informer_new(w->client, kind,
                             &(K8sInformerOptions){ .namespace = namespace, .field_selector = selector }, &handlers,
                             w, &watch->informer);
        if (r >= 0)
                r = k8s_informer_start(watch->informer);
        if (r >= 0)
                r = hashmap_put(w->watches, key, watch, NULL);
        if (r < 0) {
                watch_free(watch);
                return r;
        }
        log_debug("Watching %s", key);
        *ret = watch;
        return 0;
}

int object_watches_get(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name,
                       const void **ret) {
        _cleanup_free_ char *key = NULL;
        Watch *watch;
        int r;

        *ret = NULL;
        if (asprintf(&key, "%s/%s/%s", kind->kind, strempty(namespace), name) < 0)
                return -ENOMEM;
        watch = hashmap_get(w->watches, key);
        if (!watch) {
                r = start_watch(w, kind, namespace, name, key, &watch);
                if (r < 0)
                        return r;
        }
        watch->marked = true;
        if (!k8s_informer_synced(watch->informer))
                return -EAGAIN;
        *ret = k8s_informer_get(watch->informer, namespace, name);
        return 0;
}
