/*
 * launch_plan.c - zps launch's default recipe; see launch_plan.h.
 */
#include "launch_plan.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "data.h"
#include "parse.h"

/*
 * zps launch's default recipe, chosen so that the shortest command trains a
 * good model (docs/launch.md shows the runs that chose it): batch 32 per
 * worker, 6 epochs, momentum 0.9 with a cosine schedule over the run's
 * optimizer steps, and a learning rate of 0.05 per 128 examples in a step
 * (linear scaling: BSP steps on W*b examples, BSP with B backups on (W-B)*b,
 * SSP and ASP on one worker's b). Each part applies only when the user gave
 * nothing for it: any optimizer flag replaces the whole optimizer recipe.
 */
#define RECIPE_BATCH 32
#define RECIPE_EPOCHS 6
#define RECIPE_MOMENTUM "0.9"
#define RECIPE_LR_PER_EXAMPLE (0.05 / 128.0)

static bool any_optimizer_flag(const zps_argv_t *args)
{
    char name[64];
    for (size_t i = 0; i < args->n; i++) {
        bool missing;
        if (strncmp(args->v[i], "--", 2) == 0 &&
            (zps_argv_flag(args, &(size_t){i}, name, sizeof(name), false, &missing),
             zps_launch_is_optimizer_flag(name)))
            return true;
    }
    return false;
}

/* The last value of --flag in args, else in env (the variables come before
 * the command line, which wins). */
static const char *value(const zps_argv_t *args, const zps_argv_t *env, const char *flag)
{
    const char *v = zps_argv_last_value(args, flag);
    return v ? v : zps_argv_last_value(env, flag);
}

/*
 * With a command (-- COMMAND) launch knows no model, no data and no clocks:
 * those are the command's. So there is no recipe to fill in (the cosine's
 * length would be a guess); the servers get the optimizer flags given, or
 * zps-server's own defaults, and the line says so without claiming a model.
 */
static int plan_command(const zps_launch_opts_t *o)
{
    char opt[400] = "";
    size_t len = 0;
    const zps_argv_t *lists[2] = {&o->env_server_args, &o->server_args};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < lists[k]->n && len < sizeof(opt); i++)
            len += (size_t)snprintf(opt + len, sizeof(opt) - len, "%s%s", len ? " " : "",
                                    lists[k]->v[i]);
    bool given = any_optimizer_flag(&o->server_args) || any_optimizer_flag(&o->env_server_args);
    fprintf(stderr, "zps launch: command:");
    for (size_t i = 0; i < o->command_n; i++)
        fprintf(stderr, " %s", o->command[i]);
    fprintf(stderr, ", once per worker rank (%u rank%s); ", o->workers, o->workers == 1 ? "" : "s");
    if (given)
        fprintf(stderr, "the servers get %s\n", opt);
    else
        fprintf(stderr,
                "the servers use zps-server's default optimizer%s%s (no default recipe "
                "with a command: its model and its steps are the command's)\n",
                len ? "; they get " : "", opt);
    return 0;
}

/* Needs the number of training examples (read from the data's header, not
 * loaded) to turn epochs into clocks. */
int zps_launch_plan(zps_launch_opts_t *o)
{
    if (o->command)
        return plan_command(o);
    zps_argv_t *wa = &o->worker_args, *sa = &o->server_args;
    const zps_argv_t *we = &o->env_worker_args;
    const char *bv = value(wa, we, "batch"), *ev = value(wa, we, "epochs");
    const char *kv = value(wa, we, "clocks"), *data = value(wa, we, "data");
    const char *dir = value(wa, we, "data-dir");
    uint64_t batch = RECIPE_BATCH, epochs = RECIPE_EPOCHS, clocks = 0, n = 0;
    int bad = 0;
    if (bv)
        zps_parse_u64(bv, &batch); /* checked by zps_launch_opts_check */
    else
        bad |= zps_argv_push(wa, "--batch") || zps_argv_pushf(wa, "%d", RECIPE_BATCH);
    if (ev)
        zps_parse_u64(ev, &epochs);
    if (kv)
        zps_parse_u64(kv, &clocks);
    else if (!ev)
        bad |= zps_argv_push(wa, "--epochs") || zps_argv_pushf(wa, "%d", RECIPE_EPOCHS);
    char err[512];
    if (zps_dataset_shape(data ? data : "fashion-mnist", dir ? dir : ZPS_FASHION_MNIST_DIR,
                          &o->data_shape, err, sizeof(err)) != 0) {
        fprintf(stderr, "zps launch: %s\n", err);
        return ZPS_LAUNCH_EXIT_USAGE;
    }
    n = o->data_shape.n_train;
    o->batch = batch;
    if (n < o->workers) {
        fprintf(stderr, "zps launch: %llu training examples cannot be split among %u workers\n",
                (unsigned long long)n, o->workers);
        return ZPS_LAUNCH_EXIT_USAGE;
    }
    /* The partition rule of worker/data.h: S = ceil(floor(N/W) / b). */
    uint64_t steps = (n / o->workers + batch - 1) / batch;
    if (!kv)
        clocks = epochs * steps;
    if (!o->have_eval_every && !zps_argv_last_value(we, "eval-every")) {
        uint64_t every = steps / 2 ? steps / 2 : 1;
        bad |= zps_argv_push(wa, "--eval-every") ||
               zps_argv_pushf(wa, "%llu", (unsigned long long)every);
        o->have_eval_every = true;
    }
    char recipe[256] = "";
    bool env_optimizer = any_optimizer_flag(&o->env_server_args);
    if (!any_optimizer_flag(sa) && !env_optimizer) {
        bool on_arrival = strcmp(o->mode, "bsp") != 0;
        uint64_t per_step = on_arrival ? batch : (uint64_t)(o->workers - o->backup) * batch;
        uint64_t steps_total = on_arrival ? clocks * o->workers : clocks;
        double lr = RECIPE_LR_PER_EXAMPLE * (double)per_step;
        bad |= zps_argv_push(sa, "--optimizer") || zps_argv_push(sa, "momentum") ||
               zps_argv_push(sa, "--momentum") || zps_argv_push(sa, RECIPE_MOMENTUM) ||
               zps_argv_push(sa, "--lr") || zps_argv_pushf(sa, "%.6g", lr) ||
               zps_argv_push(sa, "--schedule") || zps_argv_push(sa, "cosine") ||
               zps_argv_push(sa, "--cosine-steps") ||
               zps_argv_pushf(sa, "%llu", (unsigned long long)(steps_total ? steps_total : 1));
        snprintf(recipe, sizeof(recipe),
                 "; momentum %s, lr %.6g (%llu examples a step), cosine over %llu steps",
                 RECIPE_MOMENTUM, lr, (unsigned long long)per_step,
                 (unsigned long long)steps_total);
    }
    if (bad) {
        fprintf(stderr, "zps launch: out of memory\n");
        return ZPS_LAUNCH_EXIT_FAILED;
    }
    const char *every = value(wa, we, "eval-every");
    char why_recipe[400] = "";
    if (recipe[0]) {
        snprintf(why_recipe, sizeof(why_recipe),
                 " (the default recipe: any optimizer flag replaces it)");
    } else if (env_optimizer && !any_optimizer_flag(sa)) {
        size_t len = (size_t)snprintf(why_recipe, sizeof(why_recipe),
                                      "; no default recipe: the environment gives the servers");
        for (size_t i = 0; i < o->env_server_args.n && len < sizeof(why_recipe); i++)
            len += (size_t)snprintf(why_recipe + len, sizeof(why_recipe) - len, " %s",
                                    o->env_server_args.v[i]);
    }
    fprintf(stderr,
            "zps launch: batch %llu per worker, %llu clocks (%.2f epochs of %llu steps)%s; "
            "evaluation every %s clocks%s\n",
            (unsigned long long)batch, (unsigned long long)clocks,
            steps ? (double)clocks / (double)steps : 0.0, (unsigned long long)steps, recipe,
            every ? every : "?", why_recipe);

    return 0;
}
