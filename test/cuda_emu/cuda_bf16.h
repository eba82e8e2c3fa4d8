// cuda_bf16.h / cuda_fp16.h (emulation) — bf16 and fp16 storage types with the device's
// conversions: float → bf16/fp16 rounds to nearest, ties to even (as __float2bfloat16 and
// __float2half do on the GPU); NaN stays NaN. test_cuda_emu checks known values.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t x;
};
typedef __nv_bfloat16 nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.x = (uint16_t)((u >> 16) | 0x40); return r; }  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    r.x = (uint16_t)(u >> 16);
    return r;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct __half {
    uint16_t x;
};
typedef __half half;

inline __half __float2half(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, absu = u & 0x7fffffffu;
    __half h;
    if (absu > 0x7f800000u) { h.x = (uint16_t)(sign | 0x7e00u); return h; }  // NaN
    if (absu >= 0x477ff000u) { h.x = (uint16_t)(sign | 0x7c00u); return h; } // rounds to inf (>= 65520)
    if (absu < 0x38800000u) {                                                  // subnormal half (< 2^-14)
        float a;
        memcpy(&a, &absu, 4);
        h.x = (uint16_t)(sign | (uint32_t)std::nearbyint(a * 16777216.0f));  // units of 2^-24, ties to even
        return h;
    }
    uint32_t mant = absu & 0x7fffffu, exp = (absu >> 23) - 112;
    uint32_t v = (exp << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) v++;  // may carry into the exponent: correct
    h.x = (uint16_t)(sign | v);
    return h;
}
inline __half __float2half_rn(float f) { return __float2half(f); }
inline float __half2float(__half h) {
    uint32_t sign = (uint32_t)(h.x & 0x8000u) << 16, exp = (h.x >> 10) & 0x1fu, mant = h.x & 0x3ffu;
    float f;
    if (exp == 0) {
        f = std::ldexp((float)mant, -24);
        if (sign) f = -f;
        return f;
    }
    uint32_t u = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
    memcpy(&f, &u, 4);
    return f;
}
