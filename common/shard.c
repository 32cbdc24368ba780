/*
 * shard.c - the range rule; see shard.h.
 */
#include "shard.h"

#include <errno.h>
#include <stdlib.h>

#include "error.h"

static uint64_t boundary(uint64_t n, uint32_t i, uint32_t count)
{
    /* i*n may overflow 64 bits for very large models; 128-bit keeps it exact. */
    return (uint64_t)(((unsigned __int128)n * i) / count);
}

int zps_shard_range(uint64_t n, uint32_t index, uint32_t count, zps_range_t *out)
{
    if (count == 0 || index >= count)
        return ZPS_EINVAL;
    out->lo = boundary(n, index, count);
    out->hi = boundary(n, index + 1, count);
    return 0;
}

int zps_shard_parse(const char *text, uint32_t *index, uint32_t *count)
{
    char *end;
    errno = 0;
    if (!text || *text < '0' || *text > '9')
        return ZPS_EINVAL;
    unsigned long i = strtoul(text, &end, 10);
    if (errno || *end != '/' || end[1] < '0' || end[1] > '9')
        return ZPS_EINVAL;
    unsigned long s = strtoul(end + 1, &end, 10);
    if (errno || *end != '\0' || s == 0 || s > 65536 || i >= s)
        return ZPS_EINVAL;
    *index = (uint32_t)i;
    *count = (uint32_t)s;
    return 0;
}
