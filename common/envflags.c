/*
 * envflags.c - flags from ZPS_* variables; see envflags.h.
 */
#include "envflags.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

void zps_envflags_var(const char *name, char *buf, size_t size)
{
    size_t n = 0;
    for (const char *p = "ZPS_"; *p && n + 1 < size; p++)
        buf[n++] = *p;
    for (const char *p = name; *p && n + 1 < size; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    if (size)
        buf[n] = '\0';
}

static bool word_in(const char *v, const char *const *words)
{
    for (size_t i = 0; words[i]; i++)
        if (strcasecmp(v, words[i]) == 0)
            return true;
    return false;
}

static int own(zps_envflags_t *e, char *s)
{
    if (!s)
        return ZPS_ENOMEM;
    e->owned[e->nowned++] = s;
    return 0;
}

int zps_envflags_build(int argc, char **argv, const struct option *options, zps_envflags_t *e,
                       char *why, size_t why_size)
{
    static const char *const yes[] = {"1", "true", "yes", NULL};
    static const char *const no[] = {"0", "false", "no", "", NULL};
    memset(e, 0, sizeof(*e));
    size_t nopt = 0;
    while (options[nopt].name)
        nopt++;
    e->argv = calloc((size_t)argc + nopt + 1, sizeof(char *));
    e->owned = calloc(nopt + 1, sizeof(char *));
    if (!e->argv || !e->owned) {
        zps_envflags_free(e);
        return ZPS_ENOMEM;
    }
    int n = 0;
    e->argv[n++] = argc > 0 ? argv[0] : "zps";
    size_t used = 0;
    for (size_t i = 0; i < nopt; i++) {
        const struct option *o = &options[i];
        if (strcmp(o->name, "help") == 0)
            continue;
        char var[128];
        zps_envflags_var(o->name, var, sizeof(var));
        const char *v = getenv(var);
        if (!v)
            continue;
        char *flag = NULL;
        if (o->has_arg == no_argument) {
            if (word_in(v, no))
                continue;
            if (!word_in(v, yes)) {
                snprintf(why, why_size,
                         "%s='%s': --%s takes no value; expected 1, true or yes "
                         "(or 0, false, no)",
                         var, v, o->name);
                zps_envflags_free(e);
                return ZPS_EINVAL;
            }
            size_t len = strlen(o->name) + 3;
            flag = malloc(len);
            if (flag)
                snprintf(flag, len, "--%s", o->name);
        } else {
            if (!*v)
                continue;
            size_t len = strlen(o->name) + strlen(v) + 4;
            flag = malloc(len);
            if (flag)
                snprintf(flag, len, "--%s=%s", o->name, v);
        }
        if (own(e, flag) != 0) {
            zps_envflags_free(e);
            return ZPS_ENOMEM;
        }
        e->argv[n++] = flag;
        int k = snprintf(e->used + used, sizeof(e->used) - used, "%s%s", used ? " " : "", var);
        if (k > 0 && (size_t)k < sizeof(e->used) - used)
            used += (size_t)k;
    }
    for (int i = 1; i < argc; i++)
        e->argv[n++] = argv[i];
    e->argv[n] = NULL;
    e->argc = n;
    return 0;
}

void zps_envflags_free(zps_envflags_t *e)
{
    for (size_t i = 0; e->owned && i < e->nowned; i++)
        free(e->owned[i]);
    free(e->owned);
    free(e->argv);
    memset(e, 0, sizeof(*e));
}
