/*
 * harness.c - see harness.h.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timeutil.h"

#ifndef ZPS_SERVER_BIN
#error "ZPS_SERVER_BIN must name the zps-server binary"
#endif

const char *harness_server_bin(void)
{
    const char *env = getenv("ZPS_SERVER_BIN");
    return env && *env ? env : ZPS_SERVER_BIN;
}

pid_t harness_spawn(const char *const *argv, const char *out_path, const char *err_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid > 0)
        return pid;
    /* Die with the test, whatever happens to it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    if (out_path) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(127);
        dup2(fd, STDOUT_FILENO);
    }
    int fd = -1;
    if (err_path) {
        if ((fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
            _exit(127);
    } else if (!getenv("ZPS_TEST_VERBOSE")) {
        fd = open("/dev/null", O_WRONLY);
    }
    if (fd >= 0)
        dup2(fd, STDERR_FILENO);
    execv(argv[0], (char *const *)argv);
    perror(argv[0]);
    _exit(127);
}

int harness_start(harness_server_t *s, const char *const *args)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/zps-test-XXXXXX");
    if (!mkdtemp(s->dir)) {
        perror("mkdtemp");
        return -1;
    }
    char epfile[320];
    snprintf(epfile, sizeof(epfile), "%s/endpoint", s->dir);

    const char *argv[64];
    int n = 0;
    argv[n++] = harness_server_bin();
    argv[n++] = "--listen";
    argv[n++] = "tcp://127.0.0.1:*";
    argv[n++] = "--endpoint-file";
    argv[n++] = epfile;
    for (int i = 0; args && args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;

    pid_t pid = harness_spawn(argv, NULL, NULL);
    if (pid < 0)
        return -1;
    s->pid = pid;
    for (int waited = 0; waited < 10000; waited += 5) {
        FILE *f = fopen(epfile, "r");
        if (f) {
            bool ok = fgets(s->endpoint, sizeof(s->endpoint), f) != NULL;
            fclose(f);
            if (ok) {
                s->endpoint[strcspn(s->endpoint, "\n")] = '\0';
                return 0;
            }
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "harness: %s exited before listening (status %d)\n", argv[0], status);
            s->pid = 0;
            return -1;
        }
        zps_sleep_ms(5);
    }
    fprintf(stderr, "harness: %s did not start listening within 10 s\n", argv[0]);
    harness_stop(s);
    return -1;
}

int harness_stop(harness_server_t *s)
{
    int result = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGCONT); /* a stopped process cannot handle SIGTERM */
        kill(s->pid, SIGTERM);
        int status = 0;
        for (int waited = 0;; waited += 10) {
            pid_t r = waitpid(s->pid, &status, WNOHANG);
            if (r == s->pid) {
                result = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                break;
            }
            if (r < 0 && errno != EINTR)
                break;
            if (waited == 5000)
                kill(s->pid, SIGKILL);
            zps_sleep_ms(10);
        }
        s->pid = 0;
    }
    if (s->dir[0]) {
        char path[320];
        snprintf(path, sizeof(path), "%s/endpoint", s->dir);
        unlink(path);
        rmdir(s->dir);
        s->dir[0] = '\0';
    }
    return result;
}

void harness_signal(harness_server_t *s, int sig)
{
    if (s->pid > 0)
        kill(s->pid, sig);
}

bool harness_alive(harness_server_t *s)
{
    if (s->pid <= 0)
        return false;
    int status;
    pid_t r = waitpid(s->pid, &status, WNOHANG);
    if (r == s->pid) {
        s->pid = 0;
        return false;
    }
    return true;
}

long harness_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}
