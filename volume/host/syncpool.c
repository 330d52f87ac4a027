/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "volume/host/syncpool.h"

struct SyncPool {
        pthread_mutex_t run;  /* held for a whole run: one at a time */
        pthread_mutex_t lock; /* the fields below */
        pthread_cond_t wake;  /* the threads: a run began, or stop */
        pthread_cond_t idle;  /* the caller: the last thread left the run */
        pthread_t threads[SYNC_POOL_THREADS - 1];
        size_t n_threads;
        bool started, stop;
        /* The run in progress (fn NULL: none), numbered so that a thread
         * joins each run at most once. */
        sync_pool_fn_t fn;
        void *data;
        size_t n;
        size_t next; /* __atomic: the next item to take */
        uint64_t generation;
        size_t busy; /* threads inside the run */
};

static void take_items(SyncPool *p, sync_pool_fn_t fn, void *data, size_t n) {
        for (size_t i; (i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED)) < n;)
                fn(i, data);
}

static void *pool_thread(void *userdata) {
        SyncPool *p = userdata;
        uint64_t seen = 0;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                while (!p->stop && (!p->fn || p->generation == seen))
                        (void) pthread_cond_wait(&p->wake, &p->lock);
                if (p->stop)
                        break;
                seen = p->generation;
                sync_pool_fn_t fn = p->fn;
                void *data = p->data;
                size_t n = p->n;
                p->busy++;
                pthread_mutex_unlock(&p->lock);

                take_items(p, fn, data, n);

                pthread_mutex_lock(&p->lock);
                if (--p->busy == 0)
                        (void) pthread_cond_signal(&p->idle);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

int sync_pool_new(SyncPool **ret) {
        SyncPool *p = calloc(1, sizeof *p);

        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->run, NULL);
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->wake, NULL);
        pthread_cond_init(&p->idle, NULL);
        *ret = p;
        return 0;
}

SyncPool *sync_pool_free(SyncPool *p) {
        if (!p)
                return NULL;
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        (void) pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (size_t i = 0; i < p->n_threads; i++)
                (void) pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->idle);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->run);
        free(p);
        return NULL;
}

/* Under p->lock.  Once: a thread that cannot be had now (out of memory or
 * of threads) leaves fewer for the whole life, the same work done. */
static void start_threads(SyncPool *p) {
        if (p->started)
                return;
        p->started = true;
        for (; p->n_threads < ELEMENTSOF(p->threads); p->n_threads++)
                if (pthread_create(&p->threads[p->n_threads], NULL, pool_thread, p) != 0)
                        break;
                else /* for top -H, and the tests */
                        (void) pthread_setname_np(p->threads[p->n_threads], "kv-sync-pool");
}

void sync_pool_run(SyncPool *p, size_t n, sync_pool_fn_t fn, void *data) {
        if (n == 0)
                return;
        pthread_mutex_lock(&p->run);
        pthread_mutex_lock(&p->lock);
        start_threads(p);
        p->fn = fn;
        p->data = data;
        p->n = n;
        p->next = 0;
        p->generation++;
        /* As many as there are items beside the caller's, not all. */
        for (size_t k = 0; k < MIN(n - 1, p->n_threads); k++)
                (void) pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->lock);

        take_items(p, fn, data, n);

        /* Every item is taken; wait for those still running elsewhere.  A
         * thread that wakes after this sees no run and sleeps again. */
        pthread_mutex_lock(&p->lock);
        p->fn = NULL;
        while (p->busy > 0)
                (void) pthread_cond_wait(&p->idle, &p->lock);
        pthread_mutex_unlock(&p->lock);
        pthread_mutex_unlock(&p->run);
}

size_t sync_pool_threads(SyncPool *p) {
        pthread_mutex_lock(&p->lock);
        size_t n = p->n_threads;
        pthread_mutex_unlock(&p->lock);
        return n;
}
