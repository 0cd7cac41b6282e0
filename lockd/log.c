/*
 * One logging module for every program of the project. Messages go to
 * stderr (foreground, tools) or syslog (daemons); debug messages are dropped
 * unless verbose. Rate limiting keeps a flood of refusals from filling the
 * journal while still telling the admin once per interval.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static const char	*log_ident = "wsfs";
static enum log_target	 log_target = LOG_TO_STDERR;
static int		 log_verbose;

void
log_open(const char *ident, enum log_target target, int verbose)
{
	log_ident = ident;
	log_target = target;
	log_verbose = verbose;
	if (target == LOG_TO_SYSLOG)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void
log_set_verbose(int verbose)
{
	log_verbose = verbose;
}

int
log_get_verbose(void)
{
	return log_verbose;
}

void
log_vmsg(int pri, const char *func, const char *fmt, va_list ap)
{
	char	 msg[2048];
	int	 saved = errno;

	if (pri == LOG_DEBUG && !log_verbose)
		return;
	vsnprintf(msg, sizeof msg, fmt, ap);
	if (log_target == LOG_TO_SYSLOG) {
		if (pri == LOG_DEBUG)
			syslog(pri, "%s: %s", func, msg);
		else
			syslog(pri, "%s", msg);
	} else {
		char	line[sizeof msg + 128];
		int	n;

		/* One write per line, so that threads never interleave. */
		if (pri == LOG_DEBUG)
			n = snprintf(line, sizeof line, "%s: %s: %s\n",
			    log_ident, func, msg);
		else
			n = snprintf(line, sizeof line, "%s: %s\n", log_ident,
			    msg);
		if (n > (int)sizeof line - 1)
			n = (int)sizeof line - 1;
		if (n > 0 && write(STDERR_FILENO, line, (size_t)n) == -1)
			(void)0;
	}
	errno = saved;
}

void
log_msg(int pri, const char *func, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vmsg(pri, func, fmt, ap);
	va_end(ap);
}

/* A small fixed table of keys is enough: refusals come in few kinds. */
#define RL_SLOTS 64
static struct {
	char		key[48];
	time_t		last;
	unsigned long	suppressed;
} rl_slots[RL_SLOTS];
static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

void
log_ratelimited(int pri, const char *func, const char *key, int interval_s,
    const char *fmt, ...)
{
	struct timespec	 now;
	unsigned long	 suppressed = 0;
	unsigned int	 h = 5381, i;
	const char	*p;
	va_list		 ap;
	int		 emit = 1;

	clock_gettime(CLOCK_MONOTONIC, &now);
	for (p = key; *p != '\0'; p++)
		h = h * 33 + (unsigned char)*p;
	i = h % RL_SLOTS;
	pthread_mutex_lock(&rl_lock);
	if (strncmp(rl_slots[i].key, key, sizeof rl_slots[i].key - 1) == 0 &&
	    rl_slots[i].last != 0 && now.tv_sec - rl_slots[i].last < interval_s) {
		rl_slots[i].suppressed++;
		emit = 0;
	} else {
		snprintf(rl_slots[i].key, sizeof rl_slots[i].key, "%s", key);
		rl_slots[i].last = now.tv_sec;
		suppressed = rl_slots[i].suppressed;
		rl_slots[i].suppressed = 0;
	}
	pthread_mutex_unlock(&rl_lock);
	if (!emit)
		return;
	va_start(ap, fmt);
	log_vmsg(pri, func, fmt, ap);
	va_end(ap);
	if (suppressed > 0)
		log_msg(pri, func, "(%lu similar messages suppressed)",
		    suppressed);
}

void
fatal_func(const char *func, const char *fmt, ...)
{
	char	msg[1024];
	int	saved = errno;
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	log_msg(LOG_CRIT, func, "%s: %s", msg, strerror(saved));
	exit(1);
}

void
fatalx_func(const char *func, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vmsg(LOG_CRIT, func, fmt, ap);
	va_end(ap);
	exit(1);
}
