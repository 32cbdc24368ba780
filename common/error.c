/*
 * error.c - names and descriptions of the ZPS_E* status codes.
 */
#include "error.h"

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
