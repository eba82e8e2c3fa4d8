// cuda_fp16.h (emulation): the fp16 type lives beside bf16 in cuda_bf16.h.
#pragma once
#include "cuda_bf16.h"
