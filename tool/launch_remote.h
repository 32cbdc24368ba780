/*
 * launch_remote.h - the far side of `zps launch --hosts` (launch_hosts.h):
 * what runs on a host, started over ssh.
 *
 *   zps launch --exec-prepare DIR NEED...
 *       Creates DIR and DIR/keys (0700), checks that every NEED is an
 *       executable file, and writes the key files sent on stdin (for each,
 *       a line "NAME MODE SIZE" and SIZE bytes; MODE 600 or 644) into
 *       DIR/keys, each through a temporary file renamed into place. Exit 0,
 *       or 1 with one line on stderr.
 *
 *   zps launch --exec-remote DIR FILE BIN ARGS...
 *       Runs BIN ARGS in DIR, in a process group of its own, with its stdout
 *       and stderr on this process's stderr; copies what is appended to FILE
 *       (removed first) to stdout as it grows; reads stdin for the
 *       launcher's word: "TERM" sends the group SIGTERM, "KILL" SIGKILL, and
 *       the end of stdin (the launcher or its connection is gone) SIGTERM,
 *       then SIGKILL 5 s later. SIGTERM, SIGINT or SIGHUP to this process
 *       are passed on as SIGTERM. Exits with BIN's status, 128 + the signal
 *       that ended it, or 127 when it could not be started.
 *
 * Not here: the launcher's side (launch.c, launch_hosts.c). Each runs as
 * its own process, single-threaded.
 */
#ifndef ZPS_LAUNCH_REMOTE_H
#define ZPS_LAUNCH_REMOTE_H

/* argv[0] is "launch", argv[1] the mode flag. Return the exit status. */
int zps_launch_exec_prepare(int argc, char **argv);
int zps_launch_exec_remote(int argc, char **argv);

/* mkdir -p with `mode` for the folders it creates. 0, or -1 with errno. */
int zps_launch_mkdir_p(const char *dir, unsigned mode);

#endif
