/*
 * shm_guard.c - SIGBUS on a registered shared mapping; see shm_guard.h.
 */
#include "shm_guard.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"

typedef struct guard {
    atomic_bool claimed;  /* the entry is someone's, from add to remove */
    _Atomic uintptr_t base; /* 0 while not watched; stored last, after size */
    atomic_size_t size;
    atomic_bool lost;
} guard_t;

static guard_t guards[ZPS_SHM_GUARD_MAX];
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static int install_failed;

/*
 * The handler may run on any thread, at any point of the owner's code. It
 * only reads the table and calls mmap, a system call (async-signal-safe in
 * practice on Linux, though POSIX does not list it).
 */
static void on_sigbus(int sig, siginfo_t *si, void *context)
{
    /* A fault has si_code > 0; kill(2) and sigqueue(3) do not. */
    if (si && si->si_code > 0) {
        uintptr_t a = (uintptr_t)si->si_addr;
        for (int i = 0; i < ZPS_SHM_GUARD_MAX; i++) {
            uintptr_t base = atomic_load_explicit(&guards[i].base, memory_order_acquire);
            size_t size = atomic_load_explicit(&guards[i].size, memory_order_relaxed);
            if (base == 0 || a < base || a - base >= size)
                continue;
            void *p = mmap((void *)base, size, PROT_READ | PROT_WRITE,
                           MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) {
                atomic_store(&guards[i].lost, true);
                return; /* the access runs again, on zero pages */
            }
            break;
        }
    }
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, si, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* What would have happened without us: the default action, which for a
     * fault comes as the access runs again. */
    signal(SIGBUS, SIG_DFL);
    if (!si || si->si_code <= 0)
        raise(SIGBUS);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    install_failed = sigaction(SIGBUS, &sa, &previous) != 0;
}

int zps_shm_guard_add(void *base, size_t size)
{
    pthread_once(&installed, install);
    if (install_failed || !base || size == 0)
        return ZPS_EINVAL;
    for (int i = 0; i < ZPS_SHM_GUARD_MAX; i++) {
        bool no = false;
        if (!atomic_compare_exchange_strong(&guards[i].claimed, &no, true))
            continue;
        atomic_store(&guards[i].lost, false);
        atomic_store_explicit(&guards[i].size, size, memory_order_relaxed);
        atomic_store_explicit(&guards[i].base, (uintptr_t)base, memory_order_release);
        return 0;
    }
    return ZPS_EBUSY;
}

static guard_t *find(const void *base)
{
    for (int i = 0; base && i < ZPS_SHM_GUARD_MAX; i++)
        if (atomic_load(&guards[i].base) == (uintptr_t)base)
            return &guards[i];
    return NULL;
}

void zps_shm_guard_remove(void *base)
{
    guard_t *g = find(base);
    if (!g)
        return;
    atomic_store(&g->base, 0);
    atomic_store(&g->claimed, false);
}

bool zps_shm_guard_lost(const void *base)
{
    const guard_t *g = find(base);
    return g && atomic_load(&g->lost);
}
