/*
 * error.c - names and descriptions of the ZPS_E* status codes.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

const char *zps_strerror(int err)
{
    switch (err) {
#define ZPS_ERROR_TEXT(name, value, text)                                                          \
    case value:                                                                                    \
        return text;
        ZPS_ERROR_LIST(ZPS_ERROR_TEXT)
#undef ZPS_ERROR_TEXT
    }
    return "unknown error";
}

const char *zps_errname(int err)
{
    switch (err) {
#define ZPS_ERROR_NAME(name, value, text)                                                          \
    case value:                                                                                    \
        return #name;
        ZPS_ERROR_LIST(ZPS_ERROR_NAME)
#undef ZPS_ERROR_NAME
    }
    return "ZPS_E?";
}

void zps_set_reason(char *why, size_t size, const char *fmt, ...)
{
    if (!why || size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
}
