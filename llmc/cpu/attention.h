// cpu/attention.h — causal multi-head self-attention (materialized softmax).
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size.
//   inp  = qkv (B,T,3C): q in [0,C), k in [C,2C), v in [2C,3C); head h uses channels [h·hs, (h+1)·hs)
//   forward:  s[t,u] = q_t·k_u / sqrt(hs) for u ≤ t;  att[t,:] = softmax(s[t,:]) (0 for u > t)
//             out[t, h·hs + i] = Σ_u att[t,u]·v_u[i]            saves att (B,NH,T,T) for the backward
//   backward: datt[t,u] = dout_t·v_u;  dv_u += Σ_t att[t,u]·dout_t
//             ds[t,u] = att[t,u]·(datt[t,u] - Σ_u' att[t,u']·datt[t,u'])
//             dq_t += Σ_u ds[t,u]·k_u / sqrt(hs);  dk_u += Σ_t ds[t,u]·q_t / sqrt(hs)
// Numerics: softmax subtracts the row max before exp. The backward is parallel over (b, h) only:
// dk and dv of a head receive contributions from every query position, and (b, h) is the
// smallest unit that owns them, so each element is summed in ascending t by one thread.
#pragma once
#include <cmath>
#include <vector>

template <typename F>
void attention_forward(F* out, F* att,                      // (B,T,C), (B,NH,T,T)
                       const F* inp,                         // (B,T,3C)
                       int B, int T, int C, int NH) {
    int hs = C / NH;
    F scale = (F)1 / std::sqrt((F)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const F* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                F* a = att + (((size_t)b * NH + h) * T + t) * T;
                F maxv = -INFINITY;
                for (int u = 0; u <= t; u++) {
                    const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
                    F s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[u] = s;
                    if (s > maxv) maxv = s;
                }
                F sum = 0;
                for (int u = 0; u <= t; u++) { a[u] = std::exp(a[u] - maxv); sum += a[u]; }
                F inv = (F)1 / sum;
                for (int u = 0; u <= t; u++) a[u] *= inv;
                for (int u = t + 1; u < T; u++) a[u] = 0;
                F* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int u = 0; u <= t; u++) {
                    const F* v = inp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[u] * v[i];
                }
            }
}

template <typename F>
void attention_backward(F* dinp,                            // (B,T,3C) accumulated into
                        const F* dout,                       // (B,T,C)
                        const F* inp, const F* att,          // (B,T,3C), (B,NH,T,T)
                        int B, int T, int C, int NH) {
    int hs = C / NH;
    F scale = (F)1 / std::sqrt((F)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<F> datt(T), ds(T);
            for (int t = 0; t < T; t++) {
                const F* a = att + (((size_t)b * NH + h) * T + t) * T;
                const F* d = dout + ((size_t)b * T + t) * C + h * hs;
                const F* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                F* dq = dinp + ((size_t)b * T + t) * C3 + h * hs;
                F dot = 0;
                for (int u = 0; u <= t; u++) {
                    const F* v = inp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    F* dv = dinp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    F s = 0;
                    for (int i = 0; i < hs; i++) { s += d[i] * v[i]; dv[i] += a[u] * d[i]; }
                    datt[u] = s;
                    dot += a[u] * s;
                }
                for (int u = 0; u <= t; u++) ds[u] = a[u] * (datt[u] - dot) * scale;
                for (int u = 0; u <= t; u++) {
                    const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
                    F* dk = dinp + ((size_t)b * T + u) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) { dq[i] += ds[u] * k[i]; dk[i] += ds[u] * q[i]; }
                }
            }
        }
}
