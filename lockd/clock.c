/*
 * Seconds, milliseconds and nanoseconds of a clock, so that no module
 * writes the timespec arithmetic again.
 */
#include "config.h"

#include "clock.h"

double
clock_s(clockid_t id)
{
	struct timespec	ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t
clock_ms(clockid_t id)
{
	struct timespec	ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
clock_ns(clockid_t id)
{
	struct timespec	ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
