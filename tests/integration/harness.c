/*
 * harness.c - see harness.h.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "keys.h"
#include "timeutil.h"

#ifndef ZPS_SERVER_BIN
#error "ZPS_SERVER_BIN must name the zps-server binary"
#endif

const char *harness_server_bin(void)
{
    const char *env = getenv("ZPS_SERVER_BIN");
    return env && *env ? env : ZPS_SERVER_BIN;
}

/* ---- the secure suite's keys ---- */

static char key_dir[64];
static char server_key[128], server_pub[128], client_key[128], client_pub[128], authorized[128];

bool harness_secure(void)
{
    const char *v = getenv("ZPS_TEST_SECURE");
    return v && *v && strcmp(v, "0") != 0;
}

bool harness_shm(void)
{
    const char *v = getenv("ZPS_TEST_SHM");
    return v && *v && strcmp(v, "0") != 0;
}

const char *harness_client_key(void)
{
    return client_key;
}

const char *harness_server_pub(void)
{
    return server_pub;
}

static void remove_keys(void)
{
    const char *files[] = {server_key, server_pub, client_key, client_pub, authorized};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if (files[i][0])
            unlink(files[i]);
    if (key_dir[0])
        rmdir(key_dir);
}

static int make_keys(void)
{
    snprintf(key_dir, sizeof(key_dir), "/tmp/zps-test-keys-XXXXXX");
    if (!mkdtemp(key_dir)) {
        perror("mkdtemp");
        key_dir[0] = '\0';
        return -1;
    }
    atexit(remove_keys);
    char prefix[96], why[256];
    zps_keypair_t srv, cli;
    snprintf(prefix, sizeof(prefix), "%s/server", key_dir);
    if (zps_keypair_generate(&srv, why, sizeof(why)) != 0 ||
        zps_keypair_write(prefix, &srv, false, why, sizeof(why)) != 0) {
        fprintf(stderr, "harness: server keys: %s\n", why);
        return -1;
    }
    snprintf(prefix, sizeof(prefix), "%s/client", key_dir);
    if (zps_keypair_generate(&cli, why, sizeof(why)) != 0 ||
        zps_keypair_write(prefix, &cli, false, why, sizeof(why)) != 0) {
        fprintf(stderr, "harness: client keys: %s\n", why);
        return -1;
    }
    snprintf(server_key, sizeof(server_key), "%s/server.key", key_dir);
    snprintf(server_pub, sizeof(server_pub), "%s/server.pub", key_dir);
    snprintf(client_key, sizeof(client_key), "%s/client.key", key_dir);
    snprintf(client_pub, sizeof(client_pub), "%s/client.pub", key_dir);
    snprintf(authorized, sizeof(authorized), "%s/authorized_keys", key_dir);
    char z85[ZPS_KEY_Z85_CHARS + 1];
    zps_key_encode(cli.public_key, z85);
    zps_keypair_clear(&srv);
    zps_keypair_clear(&cli);
    FILE *f = fopen(authorized, "w");
    /* 0644 whatever the umask: a server refuses a list its group may write. */
    if (!f || fprintf(f, "%s admin\n", z85) < 0 || fclose(f) != 0 || chmod(authorized, 0644) != 0) {
        fprintf(stderr, "harness: %s: %s\n", authorized, strerror(errno));
        return -1;
    }
    /* For the zps-worker processes the test starts (common/envflags.h). */
    setenv("ZPS_KEY", client_key, 1);
    setenv("ZPS_SERVER_KEY", server_pub, 1);
    return 0;
}

static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static int keys_rc = -1;

static void keys_once_fn(void)
{
    keys_rc = make_keys();
}

/* Tests start servers from several threads (test_bsp_matrix): made once. */
int harness_secure_keys(void)
{
    pthread_once(&keys_once, keys_once_fn);
    return keys_rc;
}

int harness_secure_socket(void *sock)
{
    if (!harness_secure())
        return 0;
    if (harness_secure_keys() != 0)
        return -1;
    zps_keypair_t kp;
    uint8_t srv[ZPS_KEY_BYTES];
    char why[256];
    if (zps_keypair_load(client_key, &kp, why, sizeof(why)) != 0 ||
        zps_pubkey_load(server_pub, srv, why, sizeof(why)) != 0) {
        fprintf(stderr, "harness: %s\n", why);
        return -1;
    }
    int rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, srv, ZPS_KEY_BYTES) == 0 &&
                     zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, kp.public_key, ZPS_KEY_BYTES) == 0 &&
                     zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, kp.secret_key, ZPS_KEY_BYTES) == 0
                 ? 0
                 : -1;
    zps_keypair_clear(&kp);
    return rc;
}

/* Made before main, while the process has one thread: setenv must not race
 * with another thread's getenv. */
__attribute__((constructor)) static void secure_keys_early(void)
{
    if (harness_secure())
        harness_secure_keys();
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
    if (harness_secure()) {
        if (harness_secure_keys() != 0)
            return -1;
        argv[n++] = "--key";
        argv[n++] = server_key;
        argv[n++] = "--authorized-keys";
        argv[n++] = authorized;
    }
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

/* The kB of a "NAME:  N kB" line of /proc/PID/status (name "VmRSS:"), or -1. */
static long status_kb(pid_t pid, const char *name)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, name, strlen(name)) == 0) {
            kb = strtol(line + strlen(name), NULL, 10);
            break;
        }
    }
    if (f)
        fclose(f);
    return kb;
}

long harness_rss_kb(pid_t pid)
{
    return status_kb(pid, "VmRSS:");
}

long harness_peak_rss_kb(pid_t pid)
{
    return status_kb(pid, "VmHWM:");
}

long harness_minor_faults(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    /* After the command's closing parenthesis: state, ppid, pgrp, session,
     * tty_nr, tpgid, flags, then minflt (proc(5), field 10). */
    const char *p = strrchr(line, ')');
    unsigned long minflt;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %lu", &minflt) != 1)
        return -1;
    return (long)minflt;
}
