/*
 * timeutil.h - monotonic time and sleeping, in the units zps uses.
 */
#ifndef ZPS_TIMEUTIL_H
#define ZPS_TIMEUTIL_H

#include <stdint.h>

/* Monotonic clock, nanoseconds since an arbitrary start. */
uint64_t zps_now_ns(void);

/* Wall clock, seconds since the epoch, with sub-second precision. */
double zps_wall_seconds(void);

/* Sleeps for `ms` milliseconds, resuming after signals. */
void zps_sleep_ms(double ms);

#endif
