// test/unit_check.h — the CHECK of the plain C++ unit tests that count their failures and go on:
//   CHECK(cond, printf-style message...)  prints "FAIL file:line: message" and counts it in `fails`
// when cond is false. The test's main returns `fails != 0`.
#pragma once
#include <cstdio>

static int fails = 0;
#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);       \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
            fails++;                                          \
        }                                                     \
    } while (0)
