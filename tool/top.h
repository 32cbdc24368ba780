/*
 * top.h - `zps top`: a live terminal view of a running cluster, built from
 * its servers' STATS, redrawn every interval with plain ANSI (clear screen,
 * cursor home; no curses). Per shard: version, step rate, min clock, pushes
 * applied, buffered and dropped, errors; per worker: clock, lag behind the
 * fastest, live or evicted, last heard; and, when a BSP or SSP barrier holds
 * the others, the line naming whom it waits for (barrier.h). With --run DIR,
 * also each worker's step time split from a `zps launch` run folder's
 * metrics files.
 *
 * Not here: who a barrier waits for (barrier.c, shared with zps launch);
 * the STATS JSON (server/stats.c); talking to servers (zps/zps.h).
 */
#ifndef ZPS_TOP_H
#define ZPS_TOP_H

/*
 * Runs `zps top` with argv[0] = "top" and its flags. Blocks until SIGINT or
 * SIGTERM (live view) or after one frame (--once). Returns the exit status:
 * 0 done (interrupted, or --once with every server answering); 1 no server
 * answered the first refresh within the deadline, or with --once some server
 * did not (each reason on stderr); 2 bad usage. "--help" prints the usage on
 * stdout and returns 0.
 */
int zps_cmd_top(int argc, char **argv);

#endif
