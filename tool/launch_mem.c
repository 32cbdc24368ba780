/*
 * launch_mem.c - zps launch's memory check; see launch_mem.h.
 */
#include "launch_mem.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"
#include "optimizer.h"
#include "shard.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

/* The coefficients of launch_mem.h's estimate. */
#define SERVER_BASE ((uint64_t)(6.5 * MIB))
#define WORKER_BASE ((uint64_t)(16 * MIB))
#define EVAL_CHUNK 1024 /* the evaluator's widest batch (worker/trainer.c) */

/* v1 reports "no limit" as a page-rounded LONG_MAX; anything this large is none. */
#define CGROUP_UNLIMITED ((uint64_t)1 << 62)

static uint64_t data_bytes(const zps_data_shape_t *d, bool test)
{
    if (d->synthetic) {
        /* Both parts generated in float32, a label or target each, and the
         * generating model. */
        uint64_t n = d->n_train + d->n_test;
        uint64_t classes = d->classes ? d->classes : 1;
        return 4 * (n * ((uint64_t)d->dim + 1) + classes * d->dim);
    }
    if (test)
        return d->n_test * (4 * (uint64_t)d->dim + 4);
    return d->n_train * ((uint64_t)d->dim + 4);
}

void zps_mem_estimate(const zps_mem_plan_t *p, zps_mem_estimate_t *out)
{
    uint64_t w = p->workers;
    uint64_t ps = p->shard_max;
    out->server = SERVER_BASE + 4 * ps * (3 + (uint64_t)p->opt_state + w);
    if (p->shm)
        out->server += 4 * ps * 2 * w;
    if (p->delay_comp)
        out->server += 4 * ps * (w + 1);
    out->worker = WORKER_BASE + 4 * 3 * p->params + data_bytes(&p->data, false) +
                  4 * 2 * p->batch * p->width_sum;
    uint64_t eval_batch = p->batch > EVAL_CHUNK ? p->batch : EVAL_CHUNK;
    out->evaluator = WORKER_BASE + 4 * 4 * p->params + data_bytes(&p->data, true) +
                     4 * 2 * eval_batch * p->width_sum;
    out->total = (uint64_t)p->servers * out->server + w * out->worker + out->evaluator;
}

/* ---- the text of /proc and /sys ---- */

bool zps_keyed_number(const char *text, const char *key, uint64_t *out)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, klen) == 0 &&
            (line[klen] == ' ' || line[klen] == '\t' || line[klen] == ':')) {
            const char *v = line + klen + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            char *end;
            errno = 0;
            unsigned long long n = strtoull(v, &end, 10);
            if (end == v || errno)
                return false;
            *out = n;
            return true;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return false;
}

bool zps_meminfo_available(const char *text, uint64_t *bytes)
{
    uint64_t kb;
    if (!zps_keyed_number(text, "MemAvailable", &kb))
        return false;
    *bytes = kb * 1024;
    return true;
}

static void copy_path(char *to, size_t size, const char *from, size_t len)
{
    if (len >= size)
        len = 0; /* a path this long is not one we can use */
    memcpy(to, from, len);
    to[len] = '\0';
}

void zps_cgroup_paths(const char *text, char *v2, size_t v2_size, char *v1, size_t v1_size)
{
    v2[0] = v1[0] = '\0';
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            const char *path = c2 + 1;
            size_t plen = len - (size_t)(path - line);
            size_t clen = (size_t)(c2 - c1 - 1);
            if (c1 - line == 1 && line[0] == '0' && clen == 0) {
                copy_path(v2, v2_size, path, plen);
            } else {
                /* the controllers, comma-separated: "memory" among them */
                for (const char *c = c1 + 1; c < c2;) {
                    const char *comma = memchr(c, ',', (size_t)(c2 - c));
                    const char *ce = comma ? comma : c2;
                    if (ce - c == 6 && strncmp(c, "memory", 6) == 0)
                        copy_path(v1, v1_size, path, plen);
                    c = ce + 1;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
}

bool zps_cgroup_number(const char *text, uint64_t *out)
{
    while (*text == ' ')
        text++;
    if (strncmp(text, "max", 3) == 0) {
        *out = UINT64_MAX;
        return true;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(text, &end, 10);
    if (end == text || errno || *text == '-')
        return false;
    *out = n >= CGROUP_UNLIMITED ? UINT64_MAX : n;
    return true;
}

/* The whole of a small file, NUL-terminated, into buf; false when unreadable. */
static bool read_text(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, size - 1, f);
    bool ok = !ferror(f);
    fclose(f);
    buf[n] = '\0';
    return ok && n > 0;
}

static bool read_number(const char *dir, const char *file, uint64_t *out)
{
    char path[PATH_MAX + 64], text[64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return read_text(path, text, sizeof(text)) && zps_cgroup_number(text, out);
}

/* The smallest headroom (limit - usage) from the cgroup `rel` under `root` up
 * to the root; UINT64_MAX when no level has a limit. */
static uint64_t cgroup_headroom(const char *root, const char *rel, const char *limit_file,
                                const char *usage_file)
{
    char dir[PATH_MAX];
    uint64_t room = UINT64_MAX;
    if (snprintf(dir, sizeof(dir), "%s%s", root, rel) >= (int)sizeof(dir))
        return room;
    size_t root_len = strlen(root);
    for (;;) {
        uint64_t limit, usage;
        if (read_number(dir, limit_file, &limit) && limit != UINT64_MAX &&
            read_number(dir, usage_file, &usage)) {
            uint64_t r = usage < limit ? limit - usage : 0;
            if (r < room)
                room = r;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < root_len)
            break;
        *slash = '\0';
    }
    return room;
}

static bool own_cgroups(char *v2, size_t v2_size, char *v1, size_t v1_size)
{
    char text[4096];
    if (!read_text("/proc/self/cgroup", text, sizeof(text)))
        return false;
    zps_cgroup_paths(text, v2, v2_size, v1, v1_size);
    return true;
}

bool zps_mem_available(uint64_t *bytes, char *how, size_t how_size)
{
    char text[8192];
    uint64_t avail = UINT64_MAX;
    snprintf(how, how_size, "MemAvailable");
    if (!read_text("/proc/meminfo", text, sizeof(text)) || !zps_meminfo_available(text, &avail))
        avail = UINT64_MAX;
    char v2[PATH_MAX], v1[PATH_MAX];
    if (own_cgroups(v2, sizeof(v2), v1, sizeof(v1))) {
        uint64_t room = UINT64_MAX;
        if (v1[0])
            room = cgroup_headroom("/sys/fs/cgroup/memory", strcmp(v1, "/") ? v1 : "",
                                   "memory.limit_in_bytes", "memory.usage_in_bytes");
        if (room == UINT64_MAX && v2[0])
            room = cgroup_headroom("/sys/fs/cgroup", strcmp(v2, "/") ? v2 : "", "memory.max",
                                   "memory.current");
        if (room < avail) {
            avail = room;
            snprintf(how, how_size, "the memory cgroup's limit");
        }
    }
    if (avail == UINT64_MAX)
        return false;
    *bytes = avail;
    return true;
}

/* ---- the plan of a run ---- */

static const char *last_value(const zps_argv_t *args, const zps_argv_t *env, const char *flag)
{
    const char *v = zps_argv_last_value(args, flag);
    return v ? v : zps_argv_last_value(env, flag);
}

static bool has_flag(const zps_argv_t *args, const char *flag)
{
    for (size_t i = 0; i < args->n; i++)
        if (strcmp(args->v[i], flag) == 0)
            return true;
    return false;
}

int zps_mem_plan_of(const zps_launch_opts_t *o, zps_mem_plan_t *plan, char *why, size_t why_size)
{
    memset(plan, 0, sizeof(*plan));
    const zps_data_shape_t *d = &o->data_shape;
    const char *spec = last_value(&o->worker_args, &o->env_worker_args, "model");
    char def[64];
    if (!spec) {
        /* the trainer's default for the data (worker/trainer.c) */
        if (d->classes > 0)
            snprintf(def, sizeof(def), "mlp:%u-256-128-%u", d->dim, d->classes);
        else
            snprintf(def, sizeof(def), "linear:%u", d->dim);
        spec = def;
    }
    zps_model_t m;
    if (zps_model_parse(spec, &m, why, why_size) != 0)
        return ZPS_EINVAL;
    plan->params = m.nparams;
    for (uint32_t l = 0; l <= m.layers; l++)
        plan->width_sum += m.sizes[l];
    for (uint32_t s = 0; s < o->servers; s++) {
        zps_range_t r;
        if (zps_shard_range(m.nparams, s, o->servers, &r) == 0 &&
            zps_range_len(r) > plan->shard_max)
            plan->shard_max = zps_range_len(r);
    }
    const char *opt = last_value(&o->server_args, &o->env_server_args, "optimizer");
    zps_opt_config_t cfg;
    if (opt && zps_opt_parse(opt, &cfg) == 0)
        plan->opt_state = (uint32_t)zps_opt_kind_state_count(cfg.kind);
    plan->servers = o->servers;
    plan->workers = o->workers;
    plan->batch = o->batch;
    plan->shm =
        !has_flag(&o->worker_args, "--no-shm") && !has_flag(&o->env_worker_args, "--no-shm") &&
        !has_flag(&o->server_args, "--no-shm") && !has_flag(&o->env_server_args, "--no-shm");
    plan->delay_comp = o->delay_comp != NULL;
    plan->data = *d;
    return 0;
}

int zps_launch_mem_check(const zps_launch_opts_t *o)
{
    zps_mem_plan_t plan;
    char why[256];
    if (zps_mem_plan_of(o, &plan, why, sizeof(why)) != 0)
        return 0; /* the flag checks report a bad model */
    zps_mem_estimate_t e;
    zps_mem_estimate(&plan, &e);
    uint64_t avail;
    char how[64];
    if (!zps_mem_available(&avail, how, sizeof(how)) || e.total <= avail)
        return 0;
    fprintf(stderr,
            "zps launch: needs about %.1f GiB on this host (%u server%s of %.2f GiB, %u worker%s "
            "of %.2f GiB, an evaluator of %.2f GiB), %.1f GiB available (%s): not started\n",
            (double)e.total / GIB, plan.servers, plan.servers == 1 ? "" : "s",
            (double)e.server / GIB, plan.workers, plan.workers == 1 ? "" : "s",
            (double)e.worker / GIB, (double)e.evaluator / GIB, (double)avail / GIB, how);
    fprintf(stderr,
            "zps launch: the model has %llu parameters; a smaller model, more hosts (--hosts) or "
            "--no-memory-check to start anyway (docs/launch.md, \"Memory\")\n",
            (unsigned long long)plan.params);
    return ZPS_LAUNCH_EXIT_USAGE;
}

/* ---- out-of-memory kills ---- */

void zps_oom_counts_read(zps_oom_counts_t *out)
{
    char text[16384];
    out->host = out->cgroup = 0;
    if (read_text("/proc/vmstat", text, sizeof(text)))
        zps_keyed_number(text, "oom_kill", &out->host);
    char v2[PATH_MAX], v1[PATH_MAX], path[PATH_MAX + 64];
    if (!own_cgroups(v2, sizeof(v2), v1, sizeof(v1)))
        return;
    /* v2 counts a subtree's kills in memory.events; v1 its own in memory.oom_control */
    if (v2[0]) {
        snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.events", strcmp(v2, "/") ? v2 : "");
        if (read_text(path, text, sizeof(text)) && zps_keyed_number(text, "oom_kill", &out->cgroup))
            return;
    }
    if (v1[0]) {
        snprintf(path, sizeof(path), "/sys/fs/cgroup/memory%s/memory.oom_control",
                 strcmp(v1, "/") ? v1 : "");
        if (read_text(path, text, sizeof(text)))
            zps_keyed_number(text, "oom_kill", &out->cgroup);
    }
}

bool zps_oom_rose(const zps_oom_counts_t *before)
{
    zps_oom_counts_t now;
    zps_oom_counts_read(&now);
    return now.host > before->host || now.cgroup > before->cgroup;
}
