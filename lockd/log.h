/*
 * Logging shared by wsfs, wslockd and wsctl: syslog when running as a
 * daemon, stderr in the foreground, debug output only when verbose.
 * The function name is added by the macros.
 */
#ifndef WS_LOG_H
#define WS_LOG_H

#include <stdarg.h>
#include <stdnoreturn.h>
#include <syslog.h>

enum log_target {
	LOG_TO_STDERR,
	LOG_TO_SYSLOG,
};

void	log_open(const char *ident, enum log_target target, int verbose);
void	log_set_verbose(int verbose);
int	log_get_verbose(void);
void	log_msg(int pri, const char *func, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));
void	log_vmsg(int pri, const char *func, const char *fmt, va_list ap)
	    __attribute__((format(printf, 3, 0)));
/* Like log_msg, but at most one message per key every interval_s seconds. */
void	log_ratelimited(int pri, const char *func, const char *key,
	    int interval_s, const char *fmt, ...)
	    __attribute__((format(printf, 5, 6)));

noreturn void	fatal_func(const char *func, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
noreturn void	fatalx_func(const char *func, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

#define log_debug(...)	log_msg(LOG_DEBUG, __func__, __VA_ARGS__)
#define log_info(...)	log_msg(LOG_INFO, __func__, __VA_ARGS__)
#define log_notice(...)	log_msg(LOG_NOTICE, __func__, __VA_ARGS__)
#define log_warn(...)	log_msg(LOG_WARNING, __func__, __VA_ARGS__)
#define log_err(...)	log_msg(LOG_ERR, __func__, __VA_ARGS__)
#define log_limited(pri, key, ...) \
	log_ratelimited(pri, __func__, key, 10, __VA_ARGS__)
/* fatal() appends strerror(errno); fatalx() does not. */
#define fatal(...)	fatal_func(__func__, __VA_ARGS__)
#define fatalx(...)	fatalx_func(__func__, __VA_ARGS__)

#endif
