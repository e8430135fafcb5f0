/*
 * Logging. Silent by default: the library lives inside every process of a GPU
 * container and must never write to the application's stderr unless asked.
 * LIBCUDA_LOG_LEVEL: 0/off (default), 1/error, 2/warn, 3/info, 4/debug.
 */
#ifndef HAMI_LOG_H
#define HAMI_LOG_H

enum { LOG_LVL_OFF = 0, LOG_LVL_ERROR = 1, LOG_LVL_WARN = 2, LOG_LVL_INFO = 3, LOG_LVL_DEBUG = 4 };

int shim_log_level(void);
void shim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SHIM_LOG(lvl, ...)                         \
    do {                                           \
        if (shim_log_level() >= (lvl))             \
            shim_log((lvl), __VA_ARGS__);          \
    } while (0)

#define LOG_ERROR(...) SHIM_LOG(LOG_LVL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) SHIM_LOG(LOG_LVL_WARN, __VA_ARGS__)
#define LOG_INFO(...) SHIM_LOG(LOG_LVL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) SHIM_LOG(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
