/*
 * launch_plan.h - zps launch's default training recipe: the flags a run gets
 * for whatever the user left unsaid (batch, epochs, evaluation period, and
 * an optimizer with its learning rate scaled to the examples in a step), and
 * the one line that says what the run will do.
 *
 * Not here: reading and checking the flags (launch_opts.h), running the
 * cluster (launch.c). It reads the data set's header (not its examples) to
 * turn epochs into clocks; main thread of zps launch.
 */
#ifndef ZPS_LAUNCH_PLAN_H
#define ZPS_LAUNCH_PLAN_H

#include "launch_opts.h"

/*
 * Appends the recipe's flags to o->worker_args and o->server_args for what
 * they do not give, sets o->have_eval_every, and prints the plan on stderr.
 * With a command (o->command) there is no recipe: it appends nothing, reads
 * no data, and the line names the command and the servers' optimizer flags.
 * Call after zps_launch_opts_check (it trusts the values). Blocks on reading
 * the data's header. Returns 0, ZPS_LAUNCH_EXIT_USAGE after one line on
 * stderr (data not found, fewer examples than workers) or
 * ZPS_LAUNCH_EXIT_FAILED (out of memory). What it appends belongs to o
 * (zps_launch_opts_free).
 */
int zps_launch_plan(zps_launch_opts_t *o);

#endif
