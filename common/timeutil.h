/*
 * timeutil.h - monotonic time and sleeping, in the units zps uses.
 *
 * Thread-safe, no state. Not here: timeouts and retry schedules (the
 * client, the server's loop), the durations histogram (hist.h).
 */
#ifndef ZPS_TIMEUTIL_H
#define ZPS_TIMEUTIL_H

#include <stdint.h>

/* Monotonic clock, nanoseconds since an arbitrary start. */
uint64_t zps_now_ns(void);

/* Wall clock, seconds since the epoch, with sub-second precision. */
double zps_wall_seconds(void);

/* Blocks the calling thread for `ms` milliseconds (nothing for ms <= 0),
 * resuming after signals. Never from a loop callback. */
void zps_sleep_ms(double ms);

#endif
