// attention_test.h — what the attention kernel tests share (test/test_cuda_attention.cpp,
// test/test_cuda_flash.cpp): a score variant, and the AttentionOpts of it on the host and on the
// device (ALiBi slopes in device memory for the kernels).
#pragma once
#include <cmath>
#include <vector>

#include "test/cuda_test.h"

// ALiBi slopes for n heads: the formula of llmc/model.h's alibi_slopes (model.h is not included:
// it pulls in the whole trainer).
static std::vector<float> test_alibi_slopes(int n) {
    std::vector<float> s(n);
    int p = 1;
    while (p * 2 <= n) p *= 2;
    for (int i = 0; i < p; i++) s[i] = (float)std::exp2(-8.0 * (i + 1) / p);
    for (int i = 0; i < n - p; i++) s[p + i] = (float)std::exp2(-8.0 * (2 * i + 1) / (2 * p));
    return s;
}

struct AttnVariant {
    const char* name;
    int scaling;      // AttnScaling
    double coeff;     // layer coefficient
    bool alibi;
    double p;         // attention dropout
    int head_offset;  // AttentionOpts::head_offset (tensor parallelism)
};

// Host and device copies of the options: identical but for where the ALiBi slopes live.
struct AttnOptsPair {
    AttentionOpts host, dev;
    std::vector<float> slopes;  // (NH)
    float* d_slopes = nullptr;  // (NH) device, freed with the pair
    AttnOptsPair() = default;
    AttnOptsPair(const AttnOptsPair&) = delete;
    ~AttnOptsPair() {
        if (d_slopes) dev_free(d_slopes);
    }
};

static void attn_opts_make(AttnOptsPair* op, const AttnVariant& v, int NH) {
    op->host = AttentionOpts{};
    op->host.scaling = v.scaling;
    op->host.coeff = v.coeff;
    op->host.dropout = DropoutSite{v.p, 7, dropout_site(2, DROPOUT_SITE_ATTN_PROBS), 5};
    op->host.head_offset = v.head_offset;
    op->dev = op->host;
    if (v.alibi) {
        op->slopes = test_alibi_slopes(NH);
        op->d_slopes = dev_upload(op->slopes);
        op->host.alibi = op->slopes.data();
        op->dev.alibi = op->d_slopes;
    }
}
