/*
 * log.h - one-line log records on stderr: UTC time, level, a process tag
 * (for example "shard 0/2" or "worker 3") and the message.
 *
 *   2026-11-29T14:15:20.123Z INFO  [shard 0/2] listening on tcp://127.0.0.1:7100
 *
 * Not a metrics stream: numbers meant for machines go to JSON, not here.
 * The level and tag are process-wide; set them once at start-up from the
 * main thread. zps_log itself may be called from any thread (one fprintf
 * per record, so records do not interleave). zps_log blocks only as long
 * as writing to stderr does; it is not for signal handlers.
 *
 * A library's caller may route the records elsewhere (zps_set_log_fn in
 * zps/zps.h): then zps_log hands each one, without time or tag, to that
 * function instead of writing it.
 *
 * Not here: the metrics stream and the progress line (worker/metrics.h);
 * the servers' statistics (STATS, server/).
 */
#ifndef ZPS_LOG_H
#define ZPS_LOG_H

#include "zps/zps.h" /* enum zps_log_level, zps_set_log_fn, zps_set_log_level */

/* The level: zps_set_log_level (zps/zps.h), from the main thread at start-up. */
/* Parses "debug", "info", "warn", "error" or "off"; returns 0 or ZPS_EINVAL. */
int zps_log_parse_level(const char *name, enum zps_log_level *out);
/* `tag` is copied (at most 63 bytes). Main thread, at start-up. */
void zps_log_set_tag(const char *tag);

/* Writes one record at `level` if the level lets it through. Any thread. */
void zps_log(enum zps_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define zps_debug(...) zps_log(ZPS_LOG_DEBUG, __VA_ARGS__)
#define zps_info(...) zps_log(ZPS_LOG_INFO, __VA_ARGS__)
#define zps_warn(...) zps_log(ZPS_LOG_WARN, __VA_ARGS__)
#define zps_error(...) zps_log(ZPS_LOG_ERROR, __VA_ARGS__)

#endif
