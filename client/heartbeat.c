/*
 * heartbeat.c - the background thread that keeps a worker from being
 * evicted while it computes: sockets of its own (ZeroMQ sockets belong to
 * one thread), stopped through a pipe. Reads only the client's options and
 * endpoints, which do not change while it runs.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "timeutil.h"

/*
 * The heartbeat thread: its own DEALER per server (ZeroMQ sockets belong to
 * one thread), HEARTBEAT every heartbeat_ms, replies read and dropped. A
 * server that is away gets nothing queued (ZMQ_IMMEDIATE), so a long outage
 * cannot pile up stale heartbeats.
 */
static void *heartbeat_main(void *arg)
{
    zps_client_t *c = arg;
    size_t n = c->nconns;
    void **socks = calloc(n, sizeof(void *));
    zmq_pollitem_t *items = calloc(n + 1, sizeof(zmq_pollitem_t));
    if (!socks || !items)
        goto done;
    int zero = 0, one = 1;
    int64_t maxmsg = REPLY_FRAME_MAX;
    for (size_t i = 0; i < n; i++) {
        socks[i] = zmq_socket(c->ctx, ZMQ_DEALER);
        if (!socks[i] || conn_secure(c, socks[i]) != 0)
            goto done;
        zmq_setsockopt(socks[i], ZMQ_LINGER, &zero, sizeof(zero));
        zmq_setsockopt(socks[i], ZMQ_IMMEDIATE, &one, sizeof(one));
        zmq_setsockopt(socks[i], ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
        conn_allow_ipv6(socks[i], c->conns[i].endpoint);
        zmq_connect(socks[i], c->conns[i].endpoint);
        items[i + 1].socket = socks[i];
        items[i + 1].events = ZMQ_POLLIN;
    }
    items[0].fd = c->hb.stop[0];
    items[0].events = ZMQ_POLLIN;
    uint64_t id = 0;
    uint64_t next = zps_now_ns();
    for (;;) {
        uint64_t now = zps_now_ns();
        if (now >= next) {
            for (size_t i = 0; i < n; i++) {
                zps_header_t h;
                zps_header_init(&h, ZPS_MSG_HEARTBEAT);
                h.worker = c->opts.worker;
                h.request_id = ++id;
                h.shard_index = (uint32_t)i;
                h.shard_count = (uint32_t)n;
                zps_wire_send(socks[i], NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
            }
            next = now + (uint64_t)c->opts.heartbeat_ms * 1000000ull;
        }
        long wait = (long)((next - zps_now_ns() + 999999) / 1000000);
        if (zmq_poll(items, (int)n + 1, wait < 0 ? 0 : wait) < 0 && zmq_errno() != EINTR)
            break;
        if (items[0].revents)
            break;
        for (size_t i = 0; i < n; i++) {
            zps_message_t m;
            while (items[i + 1].revents &&
                   zps_wire_recv(socks[i], ZMQ_DONTWAIT, false, &m) != ZPS_EAGAIN)
                zps_message_close(&m);
        }
    }
done:
    for (size_t i = 0; socks && i < n; i++)
        if (socks[i])
            zmq_close(socks[i]);
    free(socks);
    free(items);
    return NULL;
}

int heartbeat_start(zps_client_t *c)
{
    if (pipe(c->hb.stop) != 0)
        return ZPS_EIO;
    if (pthread_create(&c->hb.thread, NULL, heartbeat_main, c) != 0) {
        close(c->hb.stop[0]);
        close(c->hb.stop[1]);
        return ZPS_ENOMEM;
    }
    c->hb.running = true;
    return 0;
}

void heartbeat_stop(zps_client_t *c)
{
    if (!c->hb.running)
        return;
    char b = 1;
    while (write(c->hb.stop[1], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_join(c->hb.thread, NULL);
    close(c->hb.stop[0]);
    close(c->hb.stop[1]);
    c->hb.running = false;
}
