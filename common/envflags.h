/*
 * envflags.h - flags from the environment: a program's `--some-flag VALUE`
 * may be given as ZPS_SOME_FLAG=VALUE, for launchers that set a process's
 * environment rather than its command line (a Slurm task, a Kubernetes pod,
 * a systemd unit). The command line wins: the variables become flags placed
 * before it, and a later flag overrides an earlier one.
 *
 * A flag without a value (--insecure) takes 1, true or yes (given) and 0,
 * false, no or an empty value (not given). An empty value of a flag that
 * takes one is ignored. Variables that name no flag of the program are
 * ignored too: one environment may serve zps-server and zps-worker alike.
 * --help is never read from the environment.
 *
 * Not here: what the flags mean (each program's own table). No globals;
 * main thread, before getopt.
 */
#ifndef ZPS_ENVFLAGS_H
#define ZPS_ENVFLAGS_H

#include <getopt.h>
#include <stddef.h>

typedef struct zps_envflags {
    int argc;
    char **argv;  /* argv[0], the flags from the environment, argv[1..]; NULL-terminated */
    char **owned; /* the strings made here */
    size_t nowned;
    char used[512]; /* "ZPS_RANK ZPS_SERVERS ..." for the start-up log, "" when none */
} zps_envflags_t;

/*
 * Builds e->argv from argc/argv and the variables of the environment that
 * name a long option of `options` (a getopt_long table ending with a zero
 * entry). Returns 0, ZPS_EINVAL with the reason in why (a no-value flag
 * with another value than the ones above), or ZPS_ENOMEM.
 */
int zps_envflags_build(int argc, char **argv, const struct option *options, zps_envflags_t *e,
                       char *why, size_t why_size);

/* The name of the variable for flag `name` ("rank" -> "ZPS_RANK"). */
void zps_envflags_var(const char *name, char *buf, size_t size);

void zps_envflags_free(zps_envflags_t *e);

#endif
