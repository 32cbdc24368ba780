/*
 * ckpt_inspect.c - `zps checkpoint inspect FILE`; see ckpt_inspect.h.
 *
 * The verification itself is checkpoint/format.c's (zps_ckpt_verify, the
 * same checks --resume makes); this file only prints its findings. Numbers
 * are printed so that they can be typed back: integers in full, doubles as
 * the shortest decimal that reads back as the same double.
 */
#include "ckpt_inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "error.h"

#define EXIT_VALID 0
#define EXIT_INVALID 1
#define EXIT_UNUSABLE 2

/* The shortest "%.*g" of x that strtod reads back as x. */
static const char *num(double x, char *buf, size_t size)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

static void print_sections(const zps_ckpt_scan_t *scan)
{
    printf("\nsections (%" PRIu32 "):\n", scan->nsections);
    printf("  %-20s %6s %14s %14s %10s %10s  %s\n", "name", "id", "offset", "length", "crc32c",
           "computed", "status");
    for (uint32_t s = 0; s < scan->nsections; s++) {
        const zps_ckpt_section_check_t *sc = &scan->sections[s];
        char computed[16] = "-";
        if (sc->read)
            snprintf(computed, sizeof(computed), "0x%08" PRIx32, sc->crc_computed);
        printf("  %-20s 0x%04" PRIx32 " %14" PRIu64 " %14" PRIu64 " 0x%08" PRIx32 " %10s  %s\n",
               sc->name, sc->id, sc->offset, sc->length, sc->crc_stored, computed,
               sc->status == 0 ? "ok" : sc->why);
    }
}

/* One line for the assignment section: the plan, and where the run stands in it. */
static void print_assign(const zps_ckpt_t *c)
{
    const zps_assign_state_t *s = &c->assign;
    uint32_t finished = 0;
    for (uint32_t w = 0; w < s->workers; w++)
        finished += c->finished[w] ? 1 : 0;
    if (s->plan.examples == 0) {
        printf("assignment    no plan yet, %" PRIu32 " of %" PRIu32 " workers finished\n", finished,
               s->workers);
        return;
    }
    /* The counts as the module has them: the section verified, so it restores. */
    zps_assign_t *a = NULL;
    if (zps_assign_new(s->workers, &a) != 0 || zps_assign_restore(a, s, NULL, 0) != 0) {
        zps_assign_free(a);
        printf("assignment    (out of memory)\n");
        return;
    }
    size_t held = 0;
    for (uint32_t w = 0; w < s->workers; w++)
        held += zps_assign_held(a, w);
    printf("assignment    %" PRIu64 " examples in batches of %" PRIu32 " for %" PRIu32
           " epochs (%" PRIu64 " batches): next %" PRIu64 ", %zu queued, %zu leases held, %" PRIu64
           " completed, %" PRIu32 " of %" PRIu32 " workers finished\n",
           s->plan.examples, s->plan.batch, s->plan.epochs, zps_assign_batches(a),
           zps_assign_next(a), zps_assign_queued(a), held, zps_assign_completed(a), finished,
           s->workers);
    zps_assign_free(a);
}

static void print_contents(const zps_ckpt_scan_t *scan)
{
    const zps_ckpt_t *c = &scan->meta;
    char a[40], b[40], d[40], e[40];
    if (scan->have_shard) {
        printf("\nshard         %" PRIu32 "/%" PRIu32 " of a model of %" PRIu64
               " elements: range [%" PRIu64 ", %" PRIu64 "), %" PRIu64 " parameters\n",
               c->shard_index, c->shard_count, c->total, c->range.lo, c->range.hi,
               zps_range_len(c->range));
        printf("version       %" PRIu64 "\n", c->version);
    }
    if (scan->have_optimizer) {
        const zps_opt_config_t *o = &c->opt;
        printf("optimizer     %s, step count %" PRIu64 ", state arrays:", zps_opt_name(o),
               c->opt_steps);
        if (c->nstate == 0)
            printf(" none");
        for (uint32_t i = 0; i < c->nstate; i++)
            printf(" %s", c->state_names[i]);
        printf("\n");
        printf("  lr %s  momentum %s  nesterov %s  beta1 %s  beta2 %s\n", num(o->lr, a, sizeof(a)),
               num(o->momentum, b, sizeof(b)), o->nesterov ? "yes" : "no",
               num(o->beta1, d, sizeof(d)), num(o->beta2, e, sizeof(e)));
        printf("  eps %s  weight_decay %s\n", num(o->eps, a, sizeof(a)),
               num(o->weight_decay, b, sizeof(b)));
        printf("  schedule %s  step_every %" PRIu64 "  gamma %s  cosine_steps %" PRIu64
               "  lr_min %s  warmup %" PRIu64 "\n",
               zps_sched_name(o->schedule), o->step_every, num(o->gamma, a, sizeof(a)),
               o->cosine_steps, num(o->lr_min, b, sizeof(b)), o->warmup);
        printf("  next learning rate (step %" PRIu64 ", before any staleness scale): %s\n",
               c->opt_steps, num(zps_opt_lr_at(o, c->opt_steps), a, sizeof(a)));
    }
    if (scan->have_workers) {
        printf("consistency   %s, %" PRIu32 " workers, staleness %" PRIu32
               ", backup workers %" PRIu32 "\n",
               zps_mode_name(c->mode), c->workers, c->ssp_bound, c->backup);
        printf("  %-8s %20s %5s %20s\n", "worker", "pushed (next clock)", "live", "dropped");
        for (uint32_t w = 0; w < c->workers; w++)
            printf("  %-8" PRIu32 " %20" PRIu64 " %5s %20" PRIu64 "\n", w, c->pushed[w],
                   c->live[w] ? "yes" : "no", c->dropped[w]);
    }
    if (c->have_assign)
        print_assign(c);
}

/*
 * A file named like a checkpoint must be the checkpoint its name says:
 * --resume trusts the name to order files and skips one that lies.
 */
static int check_name(const char *path, const zps_ckpt_t *c, char *why, size_t why_size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base), sl = strlen(ZPS_CKPT_SUFFIX);
    if (strncmp(base, "shard-", 6) != 0 || n < sl || strcmp(base + n - sl, ZPS_CKPT_SUFFIX) != 0)
        return 0; /* not named as a checkpoint: nothing to compare */
    char want[128];
    if (zps_ckpt_file_name(c->shard_index, c->shard_count, c->version, want, sizeof(want)) != 0 ||
        strcmp(base, want) != 0) {
        snprintf(why, why_size, "the file name does not match its contents, which are %s", want);
        return ZPS_ECORRUPT;
    }
    return 0;
}

static void usage(void)
{
    printf("usage: zps checkpoint inspect FILE\n"
           "\n"
           "Prints a shard checkpoint's header, every section with its stored and computed\n"
           "CRC32C, and the shard state it holds, and says whether --resume would accept it.\n"
           "A FILE whose name starts with '-' is given as ./-NAME.\n"
           "\n"
           "Exit status: 0 valid, 1 invalid or corrupt, 2 unreadable or bad usage.\n");
}

int zps_cmd_checkpoint_inspect(const char *path)
{
    if (strcmp(path, "--help") == 0 || strcmp(path, "-h") == 0) {
        usage();
        return EXIT_VALID;
    }
    if (path[0] == '-') {
        fprintf(stderr,
                "zps checkpoint inspect: unknown option '%s'\n"
                "Try 'zps checkpoint inspect --help'.\n",
                path);
        return EXIT_UNUSABLE;
    }
    zps_ckpt_scan_t scan;
    char why[512] = "";
    int rc = zps_ckpt_verify(path, &scan, why, sizeof(why));
    if (rc == ZPS_EIO || rc == ZPS_EINVAL || (rc == ZPS_ENOMEM && !scan.header_ok)) {
        fprintf(stderr, "zps checkpoint inspect: %s\n", why[0] ? why : zps_strerror(rc));
        zps_ckpt_scan_fini(&scan);
        return rc == ZPS_ENOMEM ? EXIT_INVALID : EXIT_UNUSABLE;
    }

    printf("file          %s\n", path);
    printf("size          %" PRIu64 " bytes\n", scan.file_bytes);
    if (scan.header_ok) {
        printf("header        ok: zps shard checkpoint, format version %" PRIu32 ", %" PRIu64
               " bytes recorded, %" PRIu32 " sections\n",
               scan.format, scan.header_total, scan.nsections);
        print_sections(&scan);
    } else {
        printf("header        bad: %s\n", why);
    }
    print_contents(&scan);

    /* The file is intact; is it also what --resume would accept? */
    if (rc == 0) {
        rc = zps_ckpt_check_shard(&scan.meta, scan.meta.shard_index, scan.meta.shard_count, 0, why,
                                  sizeof(why));
        if (rc == 0)
            rc = check_name(path, &scan.meta, why, sizeof(why));
    }
    zps_ckpt_scan_fini(&scan);
    if (rc != 0) {
        printf("\nresult        INVALID: %s\n", why);
        return EXIT_INVALID;
    }
    printf("\nresult        valid\n");
    return EXIT_VALID;
}
