// SLUICE_FUZZ_CHECK: a property a fuzz target asserts on every input. A
// violation prints what broke and aborts, which libFuzzer reports as a crash
// (with the input saved) and the replay driver as a failed test.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define SLUICE_FUZZ_CHECK(cond, what)                                                        \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                               \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)
