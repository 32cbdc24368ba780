/*
 * conns.c - the connections a shard has accepted, and their limits; see
 * conns.h.
 */
#include "conns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "error.h"
#include "log.h"
#include "timeutil.h"

#define ADDR_MAX 64
/* Events read per call; the rest wait for the next one. */
#define EVENT_BATCH 4096
/* Below this, a connection is never the one shut down for memory. */
#define MEMORY_MIN_UNREAD (64u << 10)

struct zps_conn {
    bool open;
    bool tcp;      /* TCP_INFO works: unread bytes are watched */
    bool shut;     /* shut down by us; its close is on the way */
    bool shut_due; /* to be shut down once this batch of events is read */
    bool going;    /* shut or due to be: counted in zps_conns_t.going */
    bool authed;   /* keyed: a request from it was authenticated */
    bool anon;     /* keyed: in the lists of unauthenticated connections */
    int32_t host;  /* index into hosts, or -1 */
    /* keyed: the unauthenticated connections, oldest first, of its host and
     * of all hosts (descriptors, -1 at the ends) */
    int32_t host_prev, host_next, all_prev, all_next;
    uint64_t taken;       /* wire bytes of the complete messages read from it */
    uint64_t taken_seen;  /* taken at the previous check */
    uint64_t unread_seen; /* unread bytes at the previous check */
};

struct zps_conn_host {
    char addr[ADDR_MAX];
    uint32_t open;
    uint32_t anon;                /* keyed: open, unauthenticated, not being shut down */
    int32_t anon_head, anon_tail; /* keyed: the oldest and newest of those */
};

struct zps_conn_event {
    uint16_t what;
    int32_t value;
};
typedef struct zps_conn_event event_t;

uint32_t zps_conns_default_max(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 256;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = rl;
        want.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            rl = want;
    }
    rlim_t n = rl.rlim_cur == RLIM_INFINITY ? 65536 : rl.rlim_cur;
    n -= n / 4;
    return n > 4096 ? 4096 : n < 16 ? 16 : (uint32_t)n;
}

static bool may_log(zps_conns_t *c)
{
    uint64_t window = zps_now_ns() / 10000000000ull;
    if (window != c->log_window) {
        c->log_window = window;
        c->logged = 0;
    }
    return c->logged++ < 10;
}

int zps_conns_open(zps_conns_t *c, void *ctx, void *router, uint32_t max, uint32_t per_host)
{
    memset(c, 0, sizeof(*c));
    c->max = max;
    c->per_host = per_host;
    char where[64];
    snprintf(where, sizeof(where), "inproc://zps-conns-%p", (void *)c);
    if (zmq_socket_monitor(router, where,
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED) !=
        0)
        return ZPS_ESOCKET;
    c->monitor = zmq_socket(ctx, ZMQ_PAIR);
    if (!c->monitor)
        return ZPS_ESOCKET;
    /* Unbounded on the receiving side: ZeroMQ's I/O thread blocks on a
     * full monitor pipe, and events are a few bytes each. */
    int zero = 0;
    zmq_setsockopt(c->monitor, ZMQ_RCVHWM, &zero, sizeof(zero));
    zmq_setsockopt(c->monitor, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(c->monitor, where) != 0)
        return ZPS_ESOCKET;
    c->anon_head = c->anon_tail = -1;
    c->events = malloc(EVENT_BATCH * sizeof(*c->events));
    /* Keyed, an acceptance may make two connections due: its host's oldest
     * unauthenticated one and the oldest of all. */
    c->due = malloc(2 * EVENT_BATCH * sizeof(*c->due));
    return c->events && c->due ? 0 : ZPS_ENOMEM;
}

int zps_conns_fd(const zps_conns_t *c)
{
    int fd = -1;
    size_t len = sizeof(fd);
    if (!c->monitor || zmq_getsockopt(c->monitor, ZMQ_FD, &fd, &len) != 0)
        return -1;
    return fd;
}

void zps_conns_close(zps_conns_t *c)
{
    if (c->monitor)
        zmq_close(c->monitor);
    free(c->by_fd);
    free(c->hosts);
    free(c->events);
    free(c->due);
    memset(c, 0, sizeof(*c));
}

static zps_conn_t *conn_at(zps_conns_t *c, int fd)
{
    if (fd < 0)
        return NULL;
    if ((size_t)fd >= c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap <= (size_t)fd)
            cap *= 2;
        zps_conn_t *p = realloc(c->by_fd, cap * sizeof(*p));
        if (!p)
            return NULL;
        memset(p + c->cap, 0, (cap - c->cap) * sizeof(*p));
        c->by_fd = p;
        c->cap = cap;
    }
    return &c->by_fd[fd];
}

/* The address of fd's peer without its port ("local" for a local socket). */
static void peer_address(int fd, char *out, size_t size, bool *tcp)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    *tcp = false;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(out, size, "?");
        return;
    }
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)size);
        *tcp = true;
    } else if (ss.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)size);
        *tcp = true;
    } else {
        snprintf(out, size, "local");
    }
}

static int32_t host_of(zps_conns_t *c, const char *addr)
{
    for (size_t i = 0; i < c->nhosts; i++)
        if (strcmp(c->hosts[i].addr, addr) == 0)
            return (int32_t)i;
    /* Reuse an entry no connection holds any more. */
    for (size_t i = 0; i < c->nhosts; i++) {
        if (c->hosts[i].open == 0) {
            snprintf(c->hosts[i].addr, ADDR_MAX, "%s", addr);
            return (int32_t)i;
        }
    }
    if (c->nhosts == c->hosts_cap) {
        size_t cap = c->hosts_cap ? c->hosts_cap * 2 : 16;
        zps_conn_host_t *p = realloc(c->hosts, cap * sizeof(*p));
        if (!p)
            return -1;
        c->hosts = p;
        c->hosts_cap = cap;
    }
    zps_conn_host_t *h = &c->hosts[c->nhosts];
    snprintf(h->addr, ADDR_MAX, "%s", addr);
    h->open = 0;
    h->anon = 0;
    h->anon_head = h->anon_tail = -1;
    return (int32_t)c->nhosts++;
}

/* Keyed: fd (k) joins the newest end of its host's and all hosts' unauthenticated lists. */
static void anon_add(zps_conns_t *c, int fd, zps_conn_t *k)
{
    k->anon = true;
    k->all_prev = c->anon_tail;
    k->all_next = -1;
    if (c->anon_tail >= 0)
        c->by_fd[c->anon_tail].all_next = fd;
    else
        c->anon_head = fd;
    c->anon_tail = fd;
    c->anon++;
    k->host_prev = k->host_next = -1;
    if (k->host < 0)
        return;
    zps_conn_host_t *h = &c->hosts[k->host];
    k->host_prev = h->anon_tail;
    if (h->anon_tail >= 0)
        c->by_fd[h->anon_tail].host_next = fd;
    else
        h->anon_head = fd;
    h->anon_tail = fd;
    h->anon++;
}

/* Keyed: fd (k) leaves the unauthenticated lists (authenticated, shut down or closed). */
static void anon_remove(zps_conns_t *c, int fd, zps_conn_t *k)
{
    (void)fd;
    if (!k->anon)
        return;
    k->anon = false;
    if (k->all_prev >= 0)
        c->by_fd[k->all_prev].all_next = k->all_next;
    else
        c->anon_head = k->all_next;
    if (k->all_next >= 0)
        c->by_fd[k->all_next].all_prev = k->all_prev;
    else
        c->anon_tail = k->all_prev;
    c->anon--;
    if (k->host < 0)
        return;
    zps_conn_host_t *h = &c->hosts[k->host];
    if (k->host_prev >= 0)
        c->by_fd[k->host_prev].host_next = k->host_next;
    else
        h->anon_head = k->host_next;
    if (k->host_next >= 0)
        c->by_fd[k->host_next].host_prev = k->host_prev;
    else
        h->anon_tail = k->host_prev;
    h->anon--;
}

/* k is shut down or about to be: it no longer counts as a live connection. */
static void mark_going(zps_conns_t *c, int fd, zps_conn_t *k)
{
    anon_remove(c, fd, k);
    if (!k->going) {
        k->going = true;
        c->going++;
    }
}

static void shut(int fd, zps_conn_t *k)
{
    /* ZeroMQ's engine sees the connection end and closes the descriptor;
     * its close comes back as a DISCONNECTED event. */
    shutdown(fd, SHUT_RDWR);
    k->shut = true;
    k->shut_due = false;
}

/* Shuts down fd (k) and counts it as going. */
static void shut_now(zps_conns_t *c, int fd, zps_conn_t *k)
{
    mark_going(c, fd, k);
    shut(fd, k);
}

/* Keyed: the unauthenticated connection `fd` gives way to a new one, at the end of the batch. */
static void evict(zps_conns_t *c, int fd, const char *why, int *due, size_t *ndue)
{
    zps_conn_t *v = &c->by_fd[fd];
    mark_going(c, fd, v);
    v->shut_due = true;
    due[(*ndue)++] = fd;
    c->refused++;
    if (may_log(c))
        zps_warn("connection from %s shut down before it authenticated: %s",
                 v->host >= 0 ? c->hosts[v->host].addr : "?", why);
}

static void accepted(zps_conns_t *c, int fd, int *due, size_t *ndue)
{
    zps_conn_t *k = conn_at(c, fd);
    if (!k)
        return;
    if (k->open) {
        /* Its close was not reported (cannot happen with an ordered
         * monitor); count the old one as gone. */
        anon_remove(c, fd, k);
        if (k->going)
            c->going--;
        if (k->host >= 0 && c->hosts[k->host].open > 0)
            c->hosts[k->host].open--;
        c->open--;
    }
    char addr[ADDR_MAX];
    bool tcp;
    peer_address(fd, addr, sizeof(addr), &tcp);
    *k = (zps_conn_t){.open = true, .tcp = tcp, .host = host_of(c, addr)};
    zps_debug("connection %d from %s accepted", fd, addr);
    c->open++;
    c->accepted++;
    uint32_t from_host = 0;
    if (k->host >= 0)
        from_host = ++c->hosts[k->host].open;
    if (c->keyed) {
        /* The new connection may be a keyed client's: the oldest that has
         * not authenticated gives way, of its address, then of all. */
        anon_add(c, fd, k);
        if (c->per_host && k->host >= 0 && c->hosts[k->host].anon > c->per_host) {
            char why[128];
            snprintf(why, sizeof(why),
                     "%u from that address have not (--max-connections-per-host %u)",
                     c->hosts[k->host].anon, c->per_host);
            evict(c, c->hosts[k->host].anon_head, why, due, ndue);
        }
        if (c->open - c->going > c->max && c->anon_head >= 0) {
            char why[128];
            snprintf(why, sizeof(why), "%u open (--max-connections %u)", c->open - c->going,
                     c->max);
            evict(c, c->anon_head, why, due, ndue);
        }
        return;
    }
    bool over_all = c->open > c->max;
    bool over_host = c->per_host && from_host > c->per_host;
    if (!over_all && !over_host)
        return;
    c->refused++;
    k->shut_due = true;
    due[(*ndue)++] = fd;
    if (may_log(c)) {
        if (over_host)
            zps_warn("connection from %s refused: %u open from that address "
                     "(--max-connections-per-host %u)",
                     addr, from_host, c->per_host);
        else
            zps_warn("connection from %s refused: %u open (--max-connections %u)", addr, c->open,
                     c->max);
    }
}

static void closed(zps_conns_t *c, int fd, void (*gone)(void *, int), void *arg)
{
    zps_conn_t *k = fd >= 0 && (size_t)fd < c->cap ? &c->by_fd[fd] : NULL;
    zps_debug("connection %d closed%s", fd, k && k->open ? "" : " (not followed)");
    if (!k || !k->open)
        return;
    anon_remove(c, fd, k);
    if (k->going)
        c->going--;
    if (k->host >= 0 && c->hosts[k->host].open > 0)
        c->hosts[k->host].open--;
    c->open--;
    /* What ZeroMQ held of its unfinished messages goes back to the heap. */
    if (k->unread_seen) {
        c->released += k->unread_seen;
        c->released_ns = zps_now_ns();
    }
    *k = (zps_conn_t){.host = -1};
    if (gone)
        gone(arg, fd);
}

/* Reads up to `max` events without waiting; returns how many. */
static size_t read_events(zps_conns_t *c, event_t *ev, size_t max)
{
    size_t n = 0;
    while (n < max) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        bool ok = zmq_msg_size(&m) >= 6;
        if (ok) {
            const unsigned char *p = zmq_msg_data(&m);
            uint32_t v;
            memcpy(&ev[n].what, p, 2);
            memcpy(&v, p + 2, 4);
            ev[n].value = (int32_t)v;
        }
        int more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        /* The second frame is the endpoint: not needed. */
        while (more) {
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, c->monitor, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        if (ok)
            n++;
    }
    return n;
}

void zps_conns_events(zps_conns_t *c, void (*gone)(void *arg, int fd), void *arg)
{
    if (!c->monitor)
        return;
    event_t *ev = c->events;
    int *due = c->due;
    size_t n;
    while ((n = read_events(c, ev, EVENT_BATCH)) > 0) {
        size_t ndue = 0;
        for (size_t i = 0; i < n; i++) {
            if (ev[i].what == ZMQ_EVENT_ACCEPTED) {
                accepted(c, ev[i].value, due, &ndue);
            } else if (ev[i].what == ZMQ_EVENT_DISCONNECTED) {
                closed(c, ev[i].value, gone, arg);
            } else if (ev[i].what == ZMQ_EVENT_ACCEPT_FAILED) {
                c->accept_failed++;
                if (may_log(c))
                    zps_warn("cannot accept a connection: %s (%u open, --max-connections %u)",
                             strerror(ev[i].value), c->open, c->max);
            }
        }
        /* Shut down only what is still open after the whole batch: a
         * descriptor closed in the batch may already belong to someone else. */
        for (size_t i = 0; i < ndue; i++) {
            zps_conn_t *k = &c->by_fd[due[i]];
            if (k->open && k->shut_due)
                shut_now(c, due[i], k);
        }
        if (n < EVENT_BATCH)
            break;
    }
}

bool zps_conns_knows(const zps_conns_t *c, int fd)
{
    return fd >= 0 && (size_t)fd < c->cap && c->by_fd[fd].open;
}

void zps_conns_set_keyed(zps_conns_t *c, bool keyed)
{
    c->keyed = keyed;
}

void zps_conns_authenticated(zps_conns_t *c, int fd)
{
    if (!c->keyed || !zps_conns_knows(c, fd))
        return;
    zps_conn_t *k = &c->by_fd[fd];
    if (k->authed || k->going)
        return;
    k->authed = true;
    anon_remove(c, fd, k);
    c->authenticated++;
}

void zps_conns_took(zps_conns_t *c, int fd, uint64_t wire_bytes)
{
    if (zps_conns_knows(c, fd))
        c->by_fd[fd].taken += wire_bytes;
}

void zps_conns_set_limits(zps_conns_t *c, uint64_t max_message, uint64_t held)
{
    c->max_message = max_message;
    c->peer_buffer = max_message + ZPS_PEER_BUFFER_SLACK;
    c->unread_total = 4 * c->peer_buffer > (64ull << 20) ? 4 * c->peer_buffer : 64ull << 20;
    c->held = held;
}

uint64_t zps_conns_memory_bound(const zps_conns_t *c)
{
    if (!c->peer_buffer)
        return 0;
    return ZPS_MEMORY_BASE + c->held + (uint64_t)c->open * ZPS_CONN_OVERHEAD + c->unread_total;
}

/* Bytes received on fd that the shard has not read as whole messages; false if unknown. */
static bool unread_of(const zps_conn_t *k, int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
        return false;
    *out = ti.tcpi_bytes_received > k->taken ? ti.tcpi_bytes_received - k->taken : 0;
    return true;
}

static void close_for(zps_conns_t *c, int fd, const char *why, uint64_t unread, uint64_t limit)
{
    zps_conn_t *k = &c->by_fd[fd];
    if (may_log(c))
        zps_warn("connection from %s closed: %llu bytes sent that do not make a whole message; "
                 "%s (%llu)",
                 k->host >= 0 ? c->hosts[k->host].addr : "?", (unsigned long long)unread, why,
                 (unsigned long long)limit);
    shut_now(c, fd, k);
}

void zps_conns_watch(zps_conns_t *c)
{
    if (!c->peer_buffer)
        return;
    uint64_t sum = 0;
    int worst = -1;
    uint64_t worst_unread = 0;
    for (size_t fd = 0; fd < c->cap; fd++) {
        zps_conn_t *k = &c->by_fd[fd];
        uint64_t unread;
        if (!k->open || !k->tcp || k->shut || !unread_of(k, (int)fd, &unread))
            continue;
        k->unread_seen = unread;
        if (unread > c->peer_buffer) {
            c->closed_buffer++;
            close_for(c, (int)fd, "more than one connection may hold", unread, c->peer_buffer);
            continue;
        }
        sum += unread;
        /* A connection that has completed a message since the last check
         * is sending real messages, not piling up frames. */
        bool stuck = k->taken == k->taken_seen;
        k->taken_seen = k->taken;
        if (stuck && unread > worst_unread) {
            worst_unread = unread;
            worst = (int)fd;
        }
    }
    if (worst < 0)
        return;
    uint64_t bound = zps_conns_memory_bound(c);
    if (sum > c->unread_total) {
        c->closed_buffer++;
        close_for(c, worst, "all connections together hold more than their bound", sum,
                  c->unread_total);
    } else if (worst_unread >= MEMORY_MIN_UNREAD) {
        /* The resident size is read only when a connection could be the
         * one to close for it, not on every check. */
        uint64_t rss = zps_conns_rss();
        if (rss > bound) {
            c->closed_memory++;
            close_for(c, worst, "the server's memory is above its bound", rss, bound);
        }
    }
}

void zps_conns_json(const zps_conns_t *c, zps_strbuf_t *b)
{
    zps_strbuf_printf(b,
                      "\"connections\":{\"open\":%u,\"accepted\":%llu,\"refused\":%llu,"
                      "\"closed_buffer\":%llu,\"closed_memory\":%llu,\"accept_failed\":%llu,"
                      "\"authenticated\":%llu,\"unauthenticated\":%u,\"trims\":%llu},"
                      "\"limits\":{\"max_connections\":%u,\"max_connections_per_host\":%u,"
                      "\"max_message_bytes\":%llu,\"peer_buffer_bytes\":%llu,"
                      "\"unread_total_bytes\":%llu,\"memory_bound_bytes\":%llu}",
                      c->open, (unsigned long long)c->accepted, (unsigned long long)c->refused,
                      (unsigned long long)c->closed_buffer, (unsigned long long)c->closed_memory,
                      (unsigned long long)c->accept_failed, (unsigned long long)c->authenticated,
                      c->anon, (unsigned long long)c->trims, c->max, c->per_host,
                      (unsigned long long)c->max_message, (unsigned long long)c->peer_buffer,
                      (unsigned long long)c->unread_total,
                      (unsigned long long)zps_conns_memory_bound(c));
}

uint64_t zps_conns_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    if (n != 2)
        return 0;
    return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}
