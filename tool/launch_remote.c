/*
 * launch_remote.c - the far side of `zps launch --hosts`; see launch_remote.h.
 *
 * --exec-remote is a small supervisor: one poll() loop every 100 ms over
 * stdin (the launcher's words), the forwarded file and the child's exit. A
 * process started by sshd without a terminal gets no SIGHUP when the
 * connection drops, so the end of stdin is what tells it the launcher has
 * gone; without this supervisor a server would outlive its run.
 */
#include "launch_remote.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timeutil.h"

#define POLL_MS 100
#define KILL_AFTER_S 5.0
#define MAX_KEY_FILE 4096

int zps_launch_mkdir_p(const char *dir, unsigned mode)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* ---- --exec-prepare ---- */

static bool key_name_ok(const char *s)
{
    if (!*s || *s == '.')
        return false;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_'))
            return false;
    return true;
}

/* Writes data to dir/name with `mode`, through dir/.name.tmp. */
static int write_key_file(const char *dir, const char *name, mode_t mode, const char *data,
                          size_t len)
{
    char tmp[4300], path[4300];
    snprintf(tmp, sizeof(tmp), "%.4200s/.%s.tmp", dir, name);
    snprintf(path, sizeof(path), "%.4200s/%s", dir, name);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    bool ok = fchmod(fd, mode) == 0;
    for (size_t off = 0; ok && off < len;) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        off += n > 0 ? (size_t)n : 0;
    }
    ok = ok && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int zps_launch_exec_prepare(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "zps launch --exec-prepare: expected DIR NEED...\n");
        return 1;
    }
    const char *dir = argv[2];
    for (int i = 3; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0 || !S_ISREG(st.st_mode) || access(argv[i], X_OK) != 0) {
            fprintf(stderr,
                    "%s is not an executable file on this host (zps must be installed at the "
                    "same path on every host)\n",
                    argv[i]);
            return 1;
        }
    }
    char keys[4200];
    if (snprintf(keys, sizeof(keys), "%s/keys", dir) >= (int)sizeof(keys)) {
        fprintf(stderr, "the folder name %s is too long\n", dir);
        return 1;
    }
    if (zps_launch_mkdir_p(dir, 0755) != 0 || zps_launch_mkdir_p(keys, 0700) != 0 ||
        chmod(keys, 0700) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", keys, strerror(errno));
        return 1;
    }
    char header[200];
    while (fgets(header, sizeof(header), stdin)) {
        char name[64];
        unsigned mode;
        size_t size;
        char end;
        if (sscanf(header, "%63s %o %zu%c", name, &mode, &size, &end) != 4 || end != '\n' ||
            !key_name_ok(name) || (mode != 0600 && mode != 0644) || size > MAX_KEY_FILE) {
            fprintf(stderr, "a malformed key file header in the set-up stream\n");
            return 1;
        }
        char data[MAX_KEY_FILE];
        if (fread(data, 1, size, stdin) != size) {
            fprintf(stderr, "the set-up stream ended inside %s\n", name);
            return 1;
        }
        int rc = write_key_file(keys, name, (mode_t)mode, data, size);
        explicit_bzero(data, sizeof(data));
        if (rc != 0) {
            fprintf(stderr, "cannot write %s/%s: %s\n", keys, name, strerror(errno));
            return 1;
        }
    }
    if (ferror(stdin)) {
        fprintf(stderr, "cannot read the set-up stream: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- --exec-remote ---- */

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    got_signal = sig;
}

/* Copies what was appended to the forwarded file since the last call to stdout. */
static void forward(const char *path, int *fd, bool *out_ok)
{
    if (*fd < 0) {
        *fd = open(path, O_RDONLY | O_CLOEXEC);
        if (*fd < 0)
            return;
    }
    char buf[65536];
    for (;;) {
        ssize_t n = read(*fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        for (ssize_t off = 0; *out_ok && off < n;) {
            ssize_t w = write(1, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                *out_ok = false; /* the launcher is gone: keep reading, drop it */
            else
                off += w;
        }
    }
}

int zps_launch_exec_remote(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "zps launch --exec-remote: expected DIR FILE BIN ARGS...\n");
        return 127;
    }
    const char *dir = argv[2], *fwd = argv[3];
    if (chdir(dir) != 0) {
        fprintf(stderr, "zps launch: cannot enter %s on this host: %s\n", dir, strerror(errno));
        return 127;
    }
    unlink(fwd);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: poll returns at once */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "zps launch: cannot start %s: %s\n", argv[4], strerror(errno));
        return 127;
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) {
            dup2(null, 0);
            close(null);
        }
        dup2(2, 1);
        execv(argv[4], argv + 4);
        fprintf(stderr, "zps launch: cannot run %s: %s\n", argv[4], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);

    int ffd = -1;
    bool out_ok = true, in_open = true;
    char word[64];
    size_t wlen = 0;
    uint64_t kill_at = 0; /* when to send SIGKILL, 0: not due */
    for (;;) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        int n = poll(&p, in_open ? 1 : 0, POLL_MS);
        bool term = false, kill_now = false;
        if (n > 0 && in_open) {
            char buf[256];
            ssize_t got = read(0, buf, sizeof(buf));
            if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
                in_open = false;
                term = true;
                if (!kill_at)
                    kill_at = zps_now_ns() + (uint64_t)(KILL_AFTER_S * 1e9);
            }
            for (ssize_t i = 0; i < got; i++) {
                if (buf[i] != '\n') {
                    if (wlen + 1 < sizeof(word))
                        word[wlen++] = buf[i];
                    continue;
                }
                word[wlen] = '\0';
                wlen = 0;
                if (strcmp(word, "TERM") == 0)
                    term = true;
                else if (strcmp(word, "KILL") == 0)
                    kill_now = true;
            }
        }
        if (got_signal) {
            got_signal = 0;
            term = true;
        }
        if (term) {
            kill(-pid, SIGCONT);
            kill(-pid, SIGTERM);
        }
        if (kill_now || (kill_at && zps_now_ns() >= kill_at)) {
            kill(-pid, SIGKILL);
            kill_at = 0;
        }
        forward(fwd, &ffd, &out_ok);
        /* Look without reaping: until it is reaped, its group's id cannot be reused. */
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
            /* Whatever the child left in its group goes with it. */
            kill(-pid, SIGKILL);
            int status = 0;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            forward(fwd, &ffd, &out_ok);
            if (ffd >= 0)
                close(ffd);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
}
