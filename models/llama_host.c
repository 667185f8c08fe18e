/*
 * models/llama_host.c - train_llama.c as a library: the host half of train_llama.cu and the Llama of export_gguf,
 * compiled by the C compiler. It includes train_llama.c (with TESTING, so without its main) to reuse, unchanged, the CPU model's parameter table, seeded initialisation, model
 * files and RoPE angle table. The CUDA trainer thereby shares the exact parameter layout, init and file format of
 * the CPU trainer. Not for: any maths of the forward or backward pass (train_llama.cu).
 */
#define TESTING
#include "train_llama.c"

#include "models/llama_host.h"

Model *llama_host_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    return llama_create(spec, init_path, seed, B, T);
}

LlamaHostConfig llama_host_config(const Model *m) {
    const LlamaConfig *c = &((const Llama *)m)->cfg;
    LlamaHostConfig h = {c->L, c->C, c->NH, c->NKV, c->F, c->V, c->Vp, c->maxT, c->rope_theta, c->norm_eps};
    return h;
}

void llama_host_rope_table(float *cos_tab, float *sin_tab, int maxT, int hd, double theta) {
    rope_table(cos_tab, sin_tab, maxT, hd, theta);
}

const ModelFamily *llama_host_family(void) { return &llama_family; }
