/*
 * launch_argv.c - command lines as string vectors; see launch_argv.h.
 */
#include "launch_argv.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

int zps_argv_push(zps_argv_t *s, const char *str)
{
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return ZPS_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    char *copy = strdup(str);
    if (!copy)
        return ZPS_ENOMEM;
    s->v[s->n++] = copy;
    s->v[s->n] = NULL;
    return 0;
}

int zps_argv_pushf(zps_argv_t *s, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return zps_argv_push(s, buf);
}

int zps_argv_extend(zps_argv_t *s, const zps_argv_t *from)
{
    for (size_t i = 0; i < from->n; i++)
        if (zps_argv_push(s, from->v[i]))
            return ZPS_ENOMEM;
    return 0;
}

void zps_argv_free(zps_argv_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

const char *zps_argv_flag(const zps_argv_t *args, size_t *i, char *name, size_t size,
                          bool has_value, bool *missing)
{
    const char *item = args->v[*i] + 2;
    const char *eq = strchr(item, '=');
    size_t len = eq ? (size_t)(eq - item) : strlen(item);
    snprintf(name, size, "%.*s", (int)len, item);
    *missing = false;
    if (!has_value)
        return NULL;
    if (eq)
        return eq + 1;
    if (*i + 1 >= args->n) {
        *missing = true;
        return NULL;
    }
    return args->v[++*i];
}

const char *zps_argv_last_value(const zps_argv_t *args, const char *flag)
{
    const char *v = NULL;
    char name[64];
    for (size_t i = 0; i < args->n; i++) {
        if (strncmp(args->v[i], "--", 2) != 0)
            continue;
        bool missing;
        zps_argv_flag(args, &(size_t){i}, name, sizeof(name), false, &missing);
        if (strcmp(name, flag) != 0)
            continue;
        const char *got = zps_argv_flag(args, &i, name, sizeof(name), true, &missing);
        if (!missing)
            v = got;
    }
    return v;
}

/* Shell-quotes one word onto f when it needs it. */
static void quote_word(FILE *f, const char *w)
{
    bool plain = *w != '\0';
    for (const char *p = w; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("-_./=:,+@%", *p)))
            plain = false;
    if (plain) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = w; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

void zps_argv_write(FILE *f, const zps_argv_t *argv)
{
    for (size_t i = 0; i < argv->n; i++) {
        if (i)
            fputc(' ', f);
        quote_word(f, argv->v[i]);
    }
    fputc('\n', f);
}
