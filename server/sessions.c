/*
 * sessions.c - the table of sealed sessions; see sessions.h.
 */
#include "sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "timeutil.h"

int zps_sessions_open(zps_sessions_t *s, size_t cap)
{
    memset(s, 0, sizeof(*s));
    s->slots = calloc(cap ? cap : 1, sizeof(zps_session_t));
    if (!s->slots)
        return ZPS_ENOMEM;
    s->cap = cap ? cap : 1;
    return 0;
}

static void end(zps_sessions_t *s, zps_session_t *x)
{
    zps_seal_wipe(&x->seal);
    x->number = 0;
    x->fd = -1;
    x->user[0] = '\0';
    s->used--;
    s->ended++;
}

void zps_sessions_close(zps_sessions_t *s)
{
    for (size_t i = 0; s->slots && i < s->cap; i++)
        if (s->slots[i].number)
            end(s, &s->slots[i]);
    free(s->slots);
    s->slots = NULL;
    s->cap = 0;
}

zps_session_t *zps_sessions_grant(zps_sessions_t *s, int fd, const char *user,
                                  enum zps_seal_cipher cipher)
{
    if (!s->slots)
        return NULL;
    zps_sessions_end_fd(s, fd);
    zps_session_t *x = NULL;
    for (size_t i = 0; i < s->cap && !x; i++)
        if (!s->slots[i].number)
            x = &s->slots[i];
    if (!x) {
        /* Full: the least recently used goes. */
        x = &s->slots[0];
        for (size_t i = 1; i < s->cap; i++)
            if (s->slots[i].used_ns < x->used_ns)
                x = &s->slots[i];
        end(s, x);
    }
    zps_seal_new(&x->seal, cipher);
    x->number = ++s->next_number;
    x->fd = fd;
    snprintf(x->user, sizeof(x->user), "%s", user);
    x->used_ns = zps_now_ns();
    s->used++;
    s->granted++;
    return x;
}

zps_session_t *zps_sessions_by_id(zps_sessions_t *s, const unsigned char *id)
{
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].number && memcmp(s->slots[i].seal.id, id, ZPS_SEAL_ID_BYTES) == 0)
            return &s->slots[i];
    return NULL;
}

zps_session_t *zps_sessions_by_number(zps_sessions_t *s, uint64_t number)
{
    for (size_t i = 0; number && i < s->cap; i++)
        if (s->slots[i].number == number)
            return &s->slots[i];
    return NULL;
}

void zps_sessions_end_fd(zps_sessions_t *s, int fd)
{
    if (fd < 0)
        return;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].number && s->slots[i].fd == fd)
            end(s, &s->slots[i]);
}
