/*
 * What every fuzz target shares: libFuzzer's entry point, which each one
 * defines (built with --enable-fuzzing, linked with the fuzzer's main).
 */
#ifndef TESTS_FUZZ_FUZZ_H
#define TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
