/*
 * launch.h - `zps launch`: a whole zps cluster on this machine from one
 * command. It starts S zps-server shards on free loopback ports and W
 * zps-worker processes (or, after "--", a command of the user's once per
 * worker rank, told the cluster by its environment), shows one live
 * progress line, stops everything cleanly when training ends, on Ctrl-C or
 * when a process fails, and leaves a run folder (logs, metrics, command
 * lines, summary.json, plot tables).
 * docs/launch.md is the user's page.
 *
 * The command is five files, one idea each: launch_opts.h (the flags and
 * the check of every value a child will be handed), launch_plan.h (the
 * default recipe), launch_argv.h (command lines), launch_keys.h (the run's
 * CURVE keys, with --keys), launch.c (the supervisor: processes, progress,
 * shutdown).
 *
 * Not here: the figures themselves (runstats.h), training (trainer.h).
 */
#ifndef ZPS_LAUNCH_H
#define ZPS_LAUNCH_H

/*
 * Runs `zps launch` with argv[0] = "launch" and its flags. Blocks until every
 * process it started has exited. Returns the exit status: 0 training ended
 * and every process exited cleanly, 1 a process failed (named on stderr) or
 * the time limit passed, 2 bad usage, 130/143 interrupted by SIGINT/SIGTERM.
 * Call from the main thread of a process that runs nothing else.
 */
int zps_cmd_launch(int argc, char **argv);

#endif
