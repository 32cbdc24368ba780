/*
 * resume.c - loading a checkpoint at start-up; see resume.h.
 */
#include "resume.h"

#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "daemon.h"
#include "error.h"
#include "log.h"

/* Optimizer settings a restart may change (the kind may not): names those that differ. */
static void note_optimizer_changes(const zps_opt_config_t *was, const zps_opt_config_t *now)
{
    char diff[512] = "";
    size_t n = 0;
#define ZPS_OPT_DIFF(field, flag)                                                                  \
    if (was->field != now->field && n < sizeof(diff))                                              \
        n += (size_t)snprintf(diff + n, sizeof(diff) - n, " " flag);
    ZPS_OPT_DIFF(lr, "--lr")
    ZPS_OPT_DIFF(momentum, "--momentum")
    ZPS_OPT_DIFF(nesterov, "--nesterov")
    ZPS_OPT_DIFF(beta1, "--beta1")
    ZPS_OPT_DIFF(beta2, "--beta2")
    ZPS_OPT_DIFF(eps, "--eps")
    ZPS_OPT_DIFF(weight_decay, "--weight-decay")
    ZPS_OPT_DIFF(schedule, "--schedule")
    ZPS_OPT_DIFF(step_every, "--step-every")
    ZPS_OPT_DIFF(gamma, "--gamma")
    ZPS_OPT_DIFF(cosine_steps, "--cosine-steps")
    ZPS_OPT_DIFF(lr_min, "--lr-min")
    ZPS_OPT_DIFF(warmup, "--warmup")
#undef ZPS_OPT_DIFF
    if (n)
        zps_warn("optimizer settings differ from the checkpoint's (%s ); continuing with this "
                 "command line's",
                 diff + 1);
}

int zps_resume(zps_daemon_t *d)
{
    const zps_server_config_t *cfg = d->cfg;
    zps_ckpt_t ck;
    zps_ckpt_init(&ck);
    char path[4096] = "", why[2048] = "";
    int rc;
    if (cfg->resume_from) {
        snprintf(path, sizeof(path), "%s", cfg->resume_from);
        rc = zps_ckpt_read(path, &ck, why, sizeof(why));
        if (rc == 0 && (rc = zps_ckpt_check_shard(&ck, cfg->shard_index, cfg->shard_count, 0, why,
                                                  sizeof(why))) != 0)
            zps_ckpt_fini(&ck);
    } else {
        rc = zps_ckpt_find_latest(cfg->checkpoint_dir, cfg->shard_index, cfg->shard_count, &ck,
                                  path, sizeof(path), why, sizeof(why));
        /* The report names every newer file that was skipped, and why. */
        if (rc == 0 && why[0])
            zps_warn("skipped checkpoints: %s", why);
        if (rc == ZPS_EIO) {
            zps_info("--resume: %s; starting empty", why);
            return 0;
        }
    }
    if (rc) {
        zps_error("cannot resume from %s: %s", path[0] ? path : cfg->checkpoint_dir, why);
        return rc;
    }

    const zps_consistency_config_t *cc = &cfg->consistency;
    if (ck.mode != cc->mode || ck.workers != cc->workers || ck.ssp_bound != cc->ssp_bound ||
        ck.backup != cc->backup) {
        zps_error("cannot resume from %s: it was written by a %s shard for %u workers "
                  "(staleness %u, %u backup), this one is %s for %u (staleness %u, %u backup)",
                  path, zps_mode_name(ck.mode), ck.workers, ck.ssp_bound, ck.backup,
                  zps_mode_name(cc->mode), cc->workers, cc->ssp_bound, cc->backup);
        zps_ckpt_fini(&ck);
        return ZPS_EINVAL;
    }
    if (ck.opt.kind != cfg->opt.kind || ck.opt.nesterov != cfg->opt.nesterov) {
        zps_error("cannot resume from %s: its optimizer is %s, this shard's is %s (their state "
                  "differs)",
                  path, zps_opt_name(&ck.opt), zps_opt_name(&cfg->opt));
        zps_ckpt_fini(&ck);
        return ZPS_EINVAL;
    }
    note_optimizer_changes(&ck.opt, &cfg->opt);
    rc = zps_store_set(&d->store, ck.total, ck.range, ck.params, &cfg->opt);
    if (rc) {
        zps_error("cannot resume from %s: %s", path, zps_strerror(rc));
        zps_ckpt_fini(&ck);
        return rc;
    }
    for (uint32_t i = 0; i < ck.nstate; i++) {
        const char *name;
        float *st = zps_optimizer_state(d->store.opt, i, &name);
        ZPS_ASSERT(strcmp(name, ck.state_names[i]) == 0);
        if (d->store.len)
            memcpy(st, ck.state[i], d->store.len * sizeof(float));
    }
    zps_optimizer_set_steps(d->store.opt, ck.opt_steps);
    if (ck.have_assign) {
        /* The epochs' position: batches completed, leased, and still to
         * hand out, as they were when these parameters were saved. */
        if (!d->assign) {
            zps_error("cannot resume from %s: it holds a data assignment, which only shard 0 "
                      "keeps",
                      path);
            zps_ckpt_fini(&ck);
            return ZPS_EINVAL;
        }
        char awhy[256];
        rc = zps_assign_restore(d->assign, &ck.assign, awhy, sizeof(awhy));
        if (rc) {
            zps_error("cannot resume from %s: %s", path, awhy);
            zps_ckpt_fini(&ck);
            return rc;
        }
    }
    zps_consistency_restore(d->consistency, ck.version, ck.pushed, ck.live, ck.dropped);
    for (uint32_t w = 0; ck.have_assign && w < ck.workers; w++)
        if (ck.finished[w])
            zps_consistency_finish(d->consistency, w);
    if (ck.have_assign)
        zps_info("resumed the data assignment: %llu of %llu batches completed, %llu handed out",
                 (unsigned long long)zps_assign_completed(d->assign),
                 (unsigned long long)zps_assign_batches(d->assign),
                 (unsigned long long)zps_assign_next(d->assign));
    d->ckpts.taken = true;
    d->ckpts.version = ck.version;
    d->ckpts.saved = true;
    d->ckpts.saved_version = ck.version;
    snprintf(d->ckpts.last_path, sizeof(d->ckpts.last_path), "%s", path);
    zps_info("resumed from %s: version %llu, N = %llu, range [%llu, %llu), optimizer step %llu",
             path, (unsigned long long)ck.version, (unsigned long long)ck.total,
             (unsigned long long)ck.range.lo, (unsigned long long)ck.range.hi,
             (unsigned long long)ck.opt_steps);
    zps_ckpt_fini(&ck);
    return 0;
}
