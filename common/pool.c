/*
 * pool.c - see pool.h.
 */
#include "pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

typedef struct job {
    zps_pool_fn fn;
    void *arg;
    size_t chunks;
    unsigned lanes; /* the lanes that take chunks: 0 to lanes - 1 */
    atomic_size_t next;
} job_t;

static atomic_uint lanes_cap = ZPS_POOL_LANES_MAX;

static void run_chunks(job_t *j, unsigned lane)
{
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->chunks)
            return;
        j->fn(j->arg, i, lane);
    }
}

static struct {
    pthread_once_t once;
    pthread_mutex_t busy; /* held by the caller whose job the pool runs */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned threads;    /* helpers running */
    uint64_t generation; /* one per job */
    job_t *job;
    unsigned working; /* helpers still on the current job */
} pool = {PTHREAD_ONCE_INIT,
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          0,
          0,
          NULL,
          0};

static void *helper_main(void *arg)
{
    unsigned lane = (unsigned)(uintptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.go, &pool.mu);
        seen = pool.generation;
        job_t *j = pool.job;
        pthread_mutex_unlock(&pool.mu);
        if (lane < j->lanes)
            run_chunks(j, lane);
        pthread_mutex_lock(&pool.mu);
        if (--pool.working == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

static void pool_start(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned want = cpus >= ZPS_POOL_LANES_MAX ? ZPS_POOL_LANES_MAX - 1
                    : cpus > 1                 ? (unsigned)cpus - 1
                                               : 0;
    for (unsigned i = 0; i < want; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* Helpers take no signal: the process's handlers stay its own threads'. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&t, &attr, helper_main, (void *)(uintptr_t)(pool.threads + 1));
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.threads++;
    }
}

size_t zps_pool_chunk(size_t len, size_t unit)
{
    size_t per = (len + ZPS_POOL_CHUNKS_MAX - 1) / ZPS_POOL_CHUNKS_MAX;
    if (len < 2 * ZPS_POOL_CHUNK_MIN)
        per = len ? len : 1;
    else if (per < ZPS_POOL_CHUNK_MIN)
        per = ZPS_POOL_CHUNK_MIN;
    return (per + unit - 1) / unit * unit;
}

size_t zps_pool_chunks(size_t len, size_t chunk)
{
    return (len + chunk - 1) / chunk;
}

unsigned zps_pool_lanes(void)
{
    pthread_once(&pool.once, pool_start);
    unsigned cap = atomic_load(&lanes_cap);
    return pool.threads + 1 < cap ? pool.threads + 1 : cap;
}

void zps_pool_cap(unsigned lanes)
{
    atomic_store(&lanes_cap, lanes < 1                    ? 1
                             : lanes > ZPS_POOL_LANES_MAX ? ZPS_POOL_LANES_MAX
                                                          : lanes);
}

void zps_pool_run(size_t chunks, zps_pool_fn fn, void *arg)
{
    job_t j = {.fn = fn, .arg = arg, .chunks = chunks, .lanes = zps_pool_lanes()};
    atomic_init(&j.next, 0);
    if (chunks < 2 || j.lanes < 2 || pthread_mutex_trylock(&pool.busy) != 0) {
        run_chunks(&j, 0);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool.job = &j;
    pool.working = pool.threads;
    pool.generation++;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    run_chunks(&j, 0);
    pthread_mutex_lock(&pool.mu);
    while (pool.working > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pool.job = NULL;
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.busy);
}
