/*
 * The clocks, read one way: clock_gettime never fails for these ids, so
 * the callers get a number, not an error.
 */
#ifndef CLOCK_H
#define CLOCK_H

#include <stdint.h>
#include <time.h>

/* Seconds on clock id (CLOCK_MONOTONIC, CLOCK_REALTIME, ...). */
double		 clock_s(clockid_t id);
uint64_t	 clock_ms(clockid_t id);
uint64_t	 clock_ns(clockid_t id);

#endif
