/*
 * conn.c - the connection to one server: its DEALER socket, made a CURVE
 * client when the options ask, and the socket's ZeroMQ monitor (an inproc
 * PAIR socket) whose events say whether a zps server is connected right now.
 * The monitor is read, and polled with its socket, while a call waits
 * (call.c): it turns a call's silence into "nothing to talk to"
 * (ZPS_EUNREACHABLE) or "connected, no answer yet" (ZPS_ETIMEDOUT), and goes
 * into the periodic "waiting for server ..." log records. With CURVE it also
 * reports handshakes the server refused, which end the call at once
 * (ZPS_EAUTH). A connection attempt that failed is looked at once
 * (conn_failed_attempt) to say why. Owns conn_t's connection fields, and
 * the plain session: the socket as the carrier of last resort.
 */
#include "internal.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "error.h"
#include "log.h"

static int conn_connect_reason(const char *endpoint, int ms);

/* A PAIR socket receiving `sock`'s monitor events, attached before it
 * connects so no event is missed; NULL when one cannot be set up. */
void *conn_attach_monitor(zps_client_t *c, conn_t *k, void *sock, int events)
{
    char addr[128];
    snprintf(addr, sizeof(addr), "inproc://zps-client-monitor-%p-%zu-%u", (void *)c,
             (size_t)(k - c->conns), k->mon_gen++);
    if (zmq_socket_monitor(sock, addr, events) != 0)
        return NULL;
    void *mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (mon && zmq_connect(mon, addr) == 0) {
        int linger = 0;
        zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof(linger));
        return mon;
    }
    if (mon)
        zmq_close(mon);
    zmq_socket_monitor(sock, NULL, 0);
    return NULL;
}

/*
 * Attaches a monitor to k->sock before it connects, so no event is missed.
 * Without one (it could not be set up) the connection counts as up: a call
 * then reports ZPS_ETIMEDOUT as it did before monitors.
 */
static void open_monitor(zps_client_t *c, conn_t *k)
{
    k->up = false;
    k->tcp_seen = false;
    k->retried = false;
    k->auth_failed = 0;
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED |
                 ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    k->mon = conn_attach_monitor(c, k, k->sock, events);
    if (!k->mon)
        k->up = true;
}

/* Reads one monitor event (16-bit event, 32-bit value, then an address
 * frame); 0 when none is waiting. Never blocks. */
uint16_t conn_monitor_event(void *mon)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&m) >= sizeof(event))
        memcpy(&event, zmq_msg_data(&m), sizeof(event));
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0)
            more = false;
        else
            more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return event ? event : 0xffff;
}

/* Reads the monitor events of the connection's socket that have arrived. */
void conn_read_monitor(conn_t *k)
{
    uint16_t event;
    while (k->mon && (event = conn_monitor_event(k->mon)) != 0) {
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            k->up = true;
            k->handshakes++;
            k->auth_failed = 0;
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            /* The server ended its sessions with the connection: they see the drop. */
            k->up = false;
            k->drops++;
        } else if (event == ZMQ_EVENT_CONNECTED) {
            k->tcp_seen = true;
            k->retried = false;
            k->connect_errno = 0;
            k->connects++;
        } else if (event == ZMQ_EVENT_CONNECT_RETRIED) {
            /* ZeroMQ says an attempt failed, not why: conn_failed_attempt looks. */
            k->retried = !k->up;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
                   event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                   event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            k->auth_failed = event;
        }
    }
}

/*
 * After ZeroMQ reported a failed connection attempt (and none was made
 * since): why it failed, found out once per failure with an attempt of our
 * own (up to 500 ms), kept for zps_client_connect_error. Returns the errno,
 * or 0 when there is no new failure or it cannot be told.
 */
int conn_failed_attempt(conn_t *k)
{
    if (!k->retried || k->up)
        return 0;
    k->retried = false;
    k->connect_errno = conn_connect_reason(k->endpoint, 500);
    return k->connect_errno;
}

/* An IPv6 address (tcp://[addr]:port) needs ZMQ_IPV6 on the socket that
 * connects to it; anything else keeps ZeroMQ's IPv4 default. */
void conn_allow_ipv6(void *sock, const char *endpoint)
{
    int one = 1;
    if (strncmp(endpoint, "tcp://[", 7) == 0)
        zmq_setsockopt(sock, ZMQ_IPV6, &one, sizeof(one));
}

/* Makes sock a CURVE client when the options ask for it; before it connects. */
int conn_secure(const zps_client_t *c, void *sock)
{
    if (!c->opts.curve)
        return 0;
    const zps_client_opts_t *o = &c->opts;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, o->curve_server_key, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, o->curve_public_key, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, o->curve_secret_key, 32) != 0)
        return ZPS_ESOCKET;
    return 0;
}

/*
 * Why nothing may be there: "the host name H does not resolve (...)" when a
 * tcp:// endpoint names a host that does not resolve here, else "is a
 * server running there?". ZeroMQ retries a name that does not resolve as it
 * retries a refused connection, without a word, so the client looks. Only
 * on the paths that report a wait or a failure: getaddrinfo may block.
 */
void conn_why_unanswered(const char *endpoint, char *buf, size_t size)
{
    snprintf(buf, size, "is a server running there?");
    if (strncmp(endpoint, "tcp://", 6) != 0 || endpoint[6] == '[')
        return;
    char host[256];
    const char *h = endpoint + 6;
    const char *semi = strchr(h, ';'); /* "tcp://source;host:port" */
    if (semi)
        h = semi + 1;
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : strlen(h);
    if (n == 0 || n >= sizeof(host) || strcmp(h, "*") == 0)
        return;
    memcpy(host, h, n);
    host[n] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (res)
        freeaddrinfo(res);
    if (e == EAI_NONAME || e == EAI_AGAIN || e == EAI_FAIL
#ifdef EAI_NODATA
        || e == EAI_NODATA
#endif
    )
        snprintf(buf, size, "the host name %s does not resolve here: %s", host, gai_strerror(e));
}

/*
 * Why a connection to endpoint fails: one attempt of our own, as ZeroMQ's
 * would be (tcp://HOST:PORT, the first address HOST resolves to; or
 * ipc://PATH), given at most `ms` milliseconds. Returns the errno of the
 * failure (ECONNREFUSED: nothing listens; ENOENT: no such ipc path), or 0
 * when it connected, timed out or cannot tell. Blocks up to `ms` (and on a
 * name lookup); only called once ZeroMQ has reported a failed attempt.
 */
static int conn_connect_reason(const char *endpoint, int ms)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    memset(&ss, 0, sizeof(ss));
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)&ss;
        const char *path = endpoint + 6;
        if (strlen(path) >= sizeof(un->sun_path))
            return 0;
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, path);
        len = sizeof(*un);
    } else if (strncmp(endpoint, "tcp://", 6) == 0) {
        char host[256];
        const char *h = endpoint + 6;
        if (strchr(h, ';'))
            return 0; /* a source address: leave it to ZeroMQ */
        const char *colon = strrchr(h, ':');
        if (!colon || colon == h)
            return 0;
        size_t n = (size_t)(colon - h);
        if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
            h++;
            n -= 2;
        }
        if (n >= sizeof(host))
            return 0;
        memcpy(host, h, n);
        host[n] = '\0';
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res)
            return 0;
        memcpy(&ss, res->ai_addr, res->ai_addrlen);
        len = res->ai_addrlen;
        freeaddrinfo(res);
    } else {
        return 0;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int e = 0;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        e = errno;
        if (e == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            e = 0;
            if (poll(&p, 1, ms) == 1) {
                socklen_t el = sizeof(e);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
                    e = 0;
            }
        }
    }
    close(fd);
    return e;
}

/* "connection refused" for ECONNREFUSED, else strerror's words in lower case. */
void conn_connect_words(int e, char *buf, size_t size)
{
    snprintf(buf, size, "%s", strerror(e));
    if (buf[0] >= 'A' && buf[0] <= 'Z')
        buf[0] = (char)(buf[0] - 'A' + 'a');
}

int conn_open(zps_client_t *c, conn_t *k)
{
    k->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!k->sock)
        return ZPS_ESOCKET;
    if (conn_secure(c, k->sock) != 0) {
        client_set_error(c, "%s: cannot use CURVE: %s", k->endpoint, zmq_strerror(zmq_errno()));
        zmq_close(k->sock);
        k->sock = NULL;
        return ZPS_ESOCKET;
    }
    int linger = 0;
    int64_t maxmsg = REPLY_FRAME_MAX;
    zmq_setsockopt(k->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(k->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    conn_allow_ipv6(k->sock, k->endpoint);
    open_monitor(c, k);
    if (zmq_connect(k->sock, k->endpoint) != 0) {
        client_set_error(c, "%s: cannot connect: %s", k->endpoint, zmq_strerror(zmq_errno()));
        conn_close(k);
        return ZPS_EINVAL;
    }
    return 0;
}

/* Closes the connection's socket and its monitor. */
void conn_close(conn_t *k)
{
    if (k->mon)
        zmq_close(k->mon);
    k->mon = NULL;
    if (k->sock)
        zmq_close(k->sock);
    k->sock = NULL;
}

/*
 * Replaces a shard's socket: whatever was queued on the old one is dropped
 * (and released). That ends the connection: it counts as a drop, and the
 * sessions that rode on it end themselves when they see it.
 */
void conn_reset(zps_client_t *c, conn_t *k)
{
    conn_close(k);
    k->drops++;
    if (conn_open(c, k) != 0)
        zps_warn("%s: cannot reconnect: %s", k->endpoint, c->err);
}

/* Sends a header-only message over the connection's socket, never blocking. */
int conn_send_header(conn_t *k, zps_header_t *h)
{
    if (!k->sock)
        return ZPS_ESOCKET;
    return zps_wire_send(k->sock, NULL, h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
}

/*
 * ---- the plain session: the connection's socket itself ----
 *
 * The last of a connection's sessions: it carries whatever the others pass
 * on, a payload without copying (call_lend_payload), and reads the replies
 * that come back over the socket, the other sessions' answers among them.
 * A DEALER queues while its server is away, but not while it has no pipe
 * at all, as after a refused CURVE handshake until it reconnects: so it
 * never waits; ZPS_EAGAIN (nothing sent, the payload released) is for the
 * engine to try again soon.
 */
static int plain_send(session_t *s, zps_client_t *c, conn_t *k, zps_header_t *h)
{
    (void)s;
    if (!k->sock)
        return ZPS_ESOCKET;
    if (!k->payload)
        return conn_send_header(k, h);
    /* Its checksum was computed with its finite check (slices_sum). */
    zps_wire_free_fn *ffn = k->count > 0 ? call_lend_payload(c) : NULL;
    return zps_wire_send_summed(k->sock, NULL, h, k->payload, k->count, ffn, c, ZMQ_DONTWAIT);
}

static int plain_recv(session_t *s, zps_client_t *c, conn_t *k, zps_message_t *m)
{
    (void)s;
    (void)c;
    if (!k->sock)
        return ZPS_EAGAIN;
    /* Pull payloads are checksummed while they are copied out (copy_pulled). */
    return zps_wire_recv_deferred(k->sock, ZMQ_DONTWAIT, false, m);
}

/* Poll items for reading the sockets `a` and `b` (either may be NULL): their count. */
size_t conn_poll_items(zmq_pollitem_t *items, void *a, void *b)
{
    size_t n = 0;
    void *socks[2] = {a, b};
    for (size_t j = 0; j < 2; j++) {
        if (!socks[j])
            continue;
        memset(&items[n], 0, sizeof(items[n]));
        items[n].socket = socks[j];
        items[n].events = ZMQ_POLLIN;
        n++;
    }
    return n;
}

/* The socket, and its monitor: a refused handshake ends the call at once. */
static size_t plain_poll(session_t *s, conn_t *k, zmq_pollitem_t *items)
{
    (void)s;
    return conn_poll_items(items, k->sock, k->mon);
}

static uint64_t plain_wake(session_t *s, zps_client_t *c, conn_t *k, uint64_t now)
{
    (void)s;
    (void)c;
    (void)k;
    (void)now;
    return UINT64_MAX;
}

/* The socket is the connection's: conn_close closes it. */
static void plain_end(session_t *s, conn_t *k)
{
    (void)s;
    (void)k;
}

static const session_ops_t plain_ops = {
    .name = "plain",
    .send = plain_send,
    .recv = plain_recv,
    .claim = NULL,
    .poll = plain_poll,
    .wake = plain_wake,
    .end = plain_end,
};

/* Puts `s` in front of k's sessions (the plain one first of all). ZPS_ENOMEM when full. */
int conn_add_session(conn_t *k, session_t *s)
{
    if (k->nsessions == 0) {
        k->plain.ops = &plain_ops;
        k->sessions[k->nsessions++] = &k->plain;
    }
    if (!s || s == &k->plain)
        return 0;
    if (k->nsessions == CONN_MAX_SESSIONS)
        return ZPS_ENOMEM;
    memmove(&k->sessions[1], &k->sessions[0], k->nsessions * sizeof(k->sessions[0]));
    k->sessions[0] = s;
    k->nsessions++;
    return 0;
}

int zps_client_check_endpoint(const char *endpoint, char *why, size_t why_size)
{
    const char *bad = NULL;
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        if (endpoint[6] == '\0')
            bad = "no path after ipc://";
    } else if (strncmp(endpoint, "tcp://", 6) == 0) {
        const char *colon = strrchr(endpoint + 6, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == endpoint + 6)
            bad = "no HOST:PORT after tcp://";
        else if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || port < 1 || port > 65535)
            bad = "PORT is not a number in 1..65535";
    } else {
        bad = "no tcp:// or ipc:// in front";
    }
    if (!bad)
        return 0;
    zps_set_reason(why, why_size,
                   "invalid server endpoint '%s' (%s): expected tcp://HOST:PORT "
                   "(e.g. tcp://127.0.0.1:7100) or ipc://PATH",
                   endpoint, bad);
    return ZPS_EINVAL;
}

int zps_client_connect_error(const zps_client_t *c, size_t index)
{
    return index < c->nconns ? c->conns[index].connect_errno : 0;
}
