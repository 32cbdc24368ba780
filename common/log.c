/*
 * log.c - formatting of log records; see log.h.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"

static enum zps_log_level log_level = ZPS_LOG_INFO;
static char log_tag[64];
/* zps_set_log_fn's: read on every record, set before any thread logs. */
static zps_log_fn log_fn;
static void *log_ctx;

void zps_set_log_fn(zps_log_fn fn, void *ctx)
{
    log_ctx = ctx;
    log_fn = fn;
}

void zps_set_log_level(enum zps_log_level level)
{
    log_level = level;
}

int zps_log_parse_level(const char *name, enum zps_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum zps_log_level)i;
            return 0;
        }
    }
    return ZPS_EINVAL;
}

void zps_log_set_tag(const char *tag)
{
    snprintf(log_tag, sizeof(log_tag), "%s", tag ? tag : "");
}

void zps_log(enum zps_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    if (level < log_level || level >= ZPS_LOG_OFF)
        return;

    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);

    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_fn) {
        log_fn(level, msg, log_ctx);
        return;
    }

    /* One fprintf per record: stdio locks the stream around it. */
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s [%s] %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
            names[level], log_tag[0] ? log_tag : "zps", msg);
}
