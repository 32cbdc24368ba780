/*
 * launch_hosts.c - the hosts of `zps launch --hosts`; see launch_hosts.h.
 *
 * Set-up sends each host one stream on ssh's stdin, read by `zps launch
 * --exec-prepare` there (launch_remote.c): for every file, a line
 * "NAME MODE SIZE" and then SIZE bytes. The secret keys travel inside the
 * ssh connection only, never on a command line.
 */
#include "launch_hosts.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "fileutil.h"
#include "parse.h"
#include "timeutil.h"

#define PREPARE_TIMEOUT_S 30.0

extern char **environ;

static bool host_name_ok(const char *s)
{
    if (!*s || strlen(s) >= 256 || *s == '-')
        return false;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr(".-_:", *p)))
            return false;
    return true;
}

/* Reads "servers=N" or "workers=N" into *out; false when it is neither. */
static bool count_word(const char *w, const char *key, long max, long *out, bool *bad)
{
    size_t k = strlen(key);
    if (strncmp(w, key, k) != 0 || w[k] != '=')
        return false;
    *bad = zps_parse_long(w + k + 1, 0, max, out) != 0;
    return true;
}

/* Splits total over n hosts in order, as evenly as possible. */
static uint32_t share(uint32_t total, size_t n, size_t i)
{
    return (uint32_t)(total / n + (i < total % n ? 1 : 0));
}

int zps_launch_hosts_read(const char *path, uint32_t servers_flag, uint32_t workers_flag,
                          uint32_t servers, uint32_t workers, zps_launch_hosts_t *h, char *why,
                          size_t why_size)
{
    memset(h, 0, sizeof(*h));
    h->port = 7100;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_size, "cannot read the hosts file %s: %s", path, strerror(errno));
        return ZPS_EIO;
    }
    char line[1100];
    int lineno = 0;
    bool counted = false;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(why, why_size, "%s:%d: line too long", path, lineno);
            rc = ZPS_EINVAL;
            break;
        }
        line[strcspn(line, "#\r\n")] = '\0';
        char *save = NULL;
        char *w = strtok_r(line, " \t", &save);
        if (!w)
            continue;
        if (!host_name_ok(w)) {
            snprintf(why, why_size, "%s:%d: '%s' is not a host name or address", path, lineno, w);
            rc = ZPS_EINVAL;
            break;
        }
        for (size_t i = 0; i < h->n; i++)
            if (strcmp(h->v[i].name, w) == 0) {
                snprintf(why, why_size,
                         "%s:%d: host %s is listed twice (give it servers=N "
                         "workers=M on one line)",
                         path, lineno, w);
                rc = ZPS_EINVAL;
            }
        if (rc == 0 && h->n == ZPS_LAUNCH_MAX_HOSTS) {
            snprintf(why, why_size, "%s:%d: more than %d hosts", path, lineno,
                     ZPS_LAUNCH_MAX_HOSTS);
            rc = ZPS_EINVAL;
        }
        if (rc == 0 && h->n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            zps_launch_host_t *v = realloc(h->v, ncap * sizeof(*v));
            if (!v)
                rc = ZPS_ENOMEM;
            else
                h->v = v, cap = ncap;
        }
        if (rc)
            break;
        zps_launch_host_t *host = &h->v[h->n++];
        memset(host, 0, sizeof(*host));
        snprintf(host->name, sizeof(host->name), "%s", w);
        bool seen_s = false, seen_w = false;
        while (rc == 0 && (w = strtok_r(NULL, " \t", &save))) {
            long v = 0;
            bool bad = false;
            if (count_word(w, "servers", 256, &v, &bad) && !bad && !seen_s) {
                host->servers = (uint32_t)v;
                seen_s = true;
            } else if (!bad && count_word(w, "workers", 1024, &v, &bad) && !bad && !seen_w) {
                host->workers = (uint32_t)v;
                seen_w = true;
            } else {
                snprintf(why, why_size,
                         "%s:%d: '%s': expected servers=N (0-256) or workers=M (0-1024), "
                         "each once",
                         path, lineno, w);
                rc = ZPS_EINVAL;
            }
        }
        counted = counted || seen_s || seen_w;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(why, why_size, "cannot read the hosts file %s: %s", path, strerror(errno));
        rc = ZPS_EIO;
    }
    fclose(f);
    if (rc == 0 && h->n == 0) {
        snprintf(why, why_size, "the hosts file %s lists no host", path);
        rc = ZPS_EINVAL;
    }
    if (rc) {
        zps_launch_hosts_free(h);
        return rc;
    }
    uint32_t s = 0, r = 0;
    for (size_t i = 0; i < h->n; i++) {
        zps_launch_host_t *host = &h->v[i];
        if (!counted) {
            host->servers = share(servers, h->n, i);
            host->workers = share(workers, h->n, i);
        }
        host->first_server = s;
        host->first_worker = r;
        s += host->servers;
        r += host->workers;
    }
    if (s == 0 || r == 0 || s > 256 || r > 1024) {
        snprintf(why, why_size,
                 "the hosts file %s places %u servers and %u workers: expected "
                 "1-256 servers and 1-1024 workers",
                 path, s, r);
        zps_launch_hosts_free(h);
        return ZPS_EINVAL;
    }
    if (counted && ((servers_flag && servers_flag != s) || (workers_flag && workers_flag != r))) {
        snprintf(why, why_size,
                 "the hosts file %s places %u servers and %u workers, but "
                 "--servers %u --workers %u were given (give counts in one place)",
                 path, s, r, servers_flag ? servers_flag : s, workers_flag ? workers_flag : r);
        zps_launch_hosts_free(h);
        return ZPS_EINVAL;
    }
    h->servers = s;
    h->workers = r;
    return 0;
}

int zps_launch_hosts_set_ssh(zps_launch_hosts_t *h, const char *ssh)
{
    zps_argv_free(&h->ssh);
    char *copy = strdup(ssh);
    if (!copy)
        return ZPS_ENOMEM;
    int rc = 0;
    char *save = NULL;
    for (char *w = strtok_r(copy, " \t", &save); w && rc == 0; w = strtok_r(NULL, " \t", &save))
        rc = zps_argv_push(&h->ssh, w);
    free(copy);
    /* No terminal (output stays apart from the forwarded file), no password
     * prompt that would hang the launch, and a bound on connecting. */
    static const char *const defaults[] = {"-T",
                                           "-o",
                                           "BatchMode=yes",
                                           "-o",
                                           "ConnectTimeout=10",
                                           "-o",
                                           "ServerAliveInterval=5",
                                           "-o",
                                           "ServerAliveCountMax=3"};
    for (size_t i = 0; rc == 0 && i < sizeof(defaults) / sizeof(defaults[0]); i++)
        rc = zps_argv_push(&h->ssh, defaults[i]);
    return rc;
}

void zps_launch_hosts_set_dir(zps_launch_hosts_t *h, const char *run_dir)
{
    for (size_t i = 0; i < h->n; i++)
        snprintf(h->v[i].dir, sizeof(h->v[i].dir), "%s/hosts/%.255s", run_dir, h->v[i].name);
}

const zps_launch_host_t *zps_launch_hosts_server(const zps_launch_hosts_t *h, uint32_t shard)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->v[i].servers && shard >= h->v[i].first_server &&
            shard - h->v[i].first_server < h->v[i].servers)
            return &h->v[i];
    return NULL;
}

const zps_launch_host_t *zps_launch_hosts_worker(const zps_launch_hosts_t *h, uint32_t rank)
{
    if (rank >= h->workers)
        rank = 0; /* the evaluator runs beside worker 0 */
    for (size_t i = 0; i < h->n; i++)
        if (h->v[i].workers && rank >= h->v[i].first_worker &&
            rank - h->v[i].first_worker < h->v[i].workers)
            return &h->v[i];
    return NULL;
}

uint32_t zps_launch_hosts_port(const zps_launch_hosts_t *h, uint32_t shard)
{
    const zps_launch_host_t *on = zps_launch_hosts_server(h, shard);
    return h->port + (on ? shard - on->first_server : 0);
}

/* The words of `cmd` as one line for the far side's shell, each quoted where it needs it. */
static char *shell_line(const zps_argv_t *cmd)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    zps_argv_write(f, cmd);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    if (len && text[len - 1] == '\n')
        text[len - 1] = '\0';
    return text;
}

/* out = ssh words, host, "--", and the far command as one quoted line. */
static int ssh_command(const zps_launch_hosts_t *h, const char *host, const zps_argv_t *far,
                       zps_argv_t *out)
{
    char *line = shell_line(far);
    int rc = !line || zps_argv_extend(out, &h->ssh) || zps_argv_push(out, host) ||
                     zps_argv_push(out, "--") || zps_argv_push(out, line)
                 ? ZPS_ENOMEM
                 : 0;
    free(line);
    return rc;
}

int zps_launch_hosts_command(const zps_launch_hosts_t *h, const zps_launch_host_t *on,
                             const char *zps, const char *forward, const zps_argv_t *cmd,
                             zps_argv_t *out)
{
    zps_argv_t far = {0};
    int rc = zps_argv_push(&far, zps) || zps_argv_push(&far, "launch") ||
                     zps_argv_push(&far, "--exec-remote") || zps_argv_push(&far, on->dir) ||
                     zps_argv_push(&far, forward) || zps_argv_extend(&far, cmd)
                 ? ZPS_ENOMEM
                 : 0;
    if (rc == 0)
        rc = ssh_command(h, on->name, &far, out);
    zps_argv_free(&far);
    return rc;
}

/* Writes "NAME MODE SIZE\n" and the bytes of keys_dir/NAME to b. */
static int add_file(FILE *b, const char *keys_dir, const char *name, unsigned mode, char *why,
                    size_t why_size)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", keys_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_size, "cannot read %.400s: %s", path, strerror(errno));
        return ZPS_EIO;
    }
    char data[4096];
    size_t n = fread(data, 1, sizeof(data), f);
    bool whole = feof(f) && !ferror(f);
    fclose(f);
    if (!whole) {
        snprintf(why, why_size, "cannot read %.400s (or it is larger than a key file)", path);
        return ZPS_EIO;
    }
    bool ok = fprintf(b, "%s %o %zu\n", name, mode, n) > 0 && fwrite(data, 1, n, b) == n;
    explicit_bzero(data, sizeof(data));
    return ok ? 0 : ZPS_ENOMEM;
}

/* The key files host `on` needs, as the set-up stream. */
static int host_files(const zps_launch_hosts_t *h, const zps_launch_host_t *on,
                      const char *keys_dir, FILE *b, char *why, size_t why_size)
{
    int rc = add_file(b, keys_dir, "server.pub", 0644, why, why_size);
    if (rc == 0 && on->servers)
        rc = add_file(b, keys_dir, "server.key", 0600, why, why_size);
    if (rc == 0 && on->servers)
        rc = add_file(b, keys_dir, "authorized_keys", 0644, why, why_size);
    for (uint32_t k = 0; rc == 0 && k < on->workers; k++) {
        char name[64];
        snprintf(name, sizeof(name), "worker-%u.key", on->first_worker + k);
        rc = add_file(b, keys_dir, name, 0600, why, why_size);
    }
    if (rc == 0 && zps_launch_hosts_worker(h, h->workers) == on)
        rc = add_file(b, keys_dir, "evaluator.key", 0600, why, why_size);
    return rc;
}

/* The last non-empty line of the file at path, or "". */
static void last_line(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char buf[512];
    while (fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        size_t n = strlen(buf);
        if (n && size) {
            n = n < size ? n : size - 1;
            memcpy(out, buf, n);
            out[n] = '\0';
        }
    }
    fclose(f);
}

/* Runs argv with `data` on its stdin and stderr into err_fd; waits at most PREPARE_TIMEOUT_S. */
static int run_with_input(char *const *argv, const char *data, size_t len, int err_fd, int *status,
                          bool *timed_out)
{
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return ZPS_EIO;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in[0]);
    if (e != 0) {
        close(in[1]);
        errno = e;
        return ZPS_EINVAL;
    }
    /* A peer that dies early must not kill the launcher with SIGPIPE. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGPIPE, &ign, &old);
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(in[1], data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* ssh has gone: its status says why */
        off += (size_t)n;
    }
    close(in[1]);
    sigaction(SIGPIPE, &old, NULL);
    uint64_t t0 = zps_now_ns();
    *timed_out = false;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return ZPS_EIO;
        if ((double)(zps_now_ns() - t0) / 1e9 > PREPARE_TIMEOUT_S && !*timed_out) {
            *timed_out = true;
            kill(-pid, SIGKILL);
        }
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
}

int zps_launch_hosts_prepare(const zps_launch_hosts_t *h, const char *zps, const char *keys_dir,
                             const char *server_bin, const char *worker_bin, int log_fd,
                             const char *log_dir, char *why, size_t why_size)
{
    for (size_t i = 0; i < h->n; i++) {
        const zps_launch_host_t *on = &h->v[i];
        if (!on->servers && !on->workers)
            continue;
        char *data = NULL;
        size_t len = 0;
        char reason[512];
        FILE *b = open_memstream(&data, &len);
        int rc = b ? host_files(h, on, keys_dir, b, reason, sizeof(reason)) : ZPS_ENOMEM;
        if (b && fclose(b) != 0 && rc == 0)
            rc = ZPS_ENOMEM;
        zps_argv_t far = {0}, argv = {0};
        if (rc == 0)
            rc = zps_argv_push(&far, zps) || zps_argv_push(&far, "launch") ||
                         zps_argv_push(&far, "--exec-prepare") || zps_argv_push(&far, on->dir) ||
                         zps_argv_push(&far, zps) ||
                         (on->servers && zps_argv_push(&far, server_bin)) ||
                         (on->workers && zps_argv_push(&far, worker_bin)) ||
                         ssh_command(h, on->name, &far, &argv)
                     ? ZPS_ENOMEM
                     : 0;
        if (rc == ZPS_ENOMEM)
            snprintf(reason, sizeof(reason), "out of memory");
        char err_path[PATH_MAX + 300], err_name[300];
        snprintf(err_path, sizeof(err_path), "%s/setup-%s.log", log_dir, on->name);
        snprintf(err_name, sizeof(err_name), "setup-%s.log", on->name);
        int err_fd = -1;
        if (rc == 0 && (err_fd = zps_file_create_at(log_fd, err_name, 0, 0644)) < 0) {
            zps_set_reason(reason, sizeof(reason), "cannot create %s: %s", err_path,
                           strerror(errno));
            rc = ZPS_EIO;
        }
        if (rc == 0) {
            int status = 0;
            bool timed_out = false;
            rc = run_with_input(argv.v, data, len, err_fd, &status, &timed_out);
            if (rc == ZPS_EINVAL) {
                snprintf(reason, sizeof(reason), "cannot run %s: %s", argv.v[0], strerror(errno));
            } else if (rc) {
                snprintf(reason, sizeof(reason), "waiting for ssh: %s", strerror(errno));
            } else if (timed_out) {
                snprintf(reason, sizeof(reason), "no answer over ssh within %.0f s",
                         PREPARE_TIMEOUT_S);
                rc = ZPS_EIO;
            } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                char last[400];
                last_line(err_path, last, sizeof(last));
                int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                snprintf(reason, sizeof(reason), "%s (%s %d)", last[0] ? last : "set-up failed",
                         code == 255 ? "ssh status" : "status", code);
                rc = ZPS_EIO;
            }
        }
        if (err_fd >= 0)
            close(err_fd);
        if (data)
            explicit_bzero(data, len);
        free(data);
        zps_argv_free(&far);
        zps_argv_free(&argv);
        if (rc) {
            snprintf(why, why_size, "%s: %s", on->name, reason);
            return rc == ZPS_ENOMEM ? rc : ZPS_EIO;
        }
    }
    return 0;
}

void zps_launch_hosts_free(zps_launch_hosts_t *h)
{
    free(h->v);
    zps_argv_free(&h->ssh);
    h->v = NULL;
    h->n = 0;
}
