/*
 * models/gpt2_host.c - train_gpt.c as a library: the host half of train_gpt.cu and the GPT-2 of export_gguf,
 * compiled by the C compiler. It includes train_gpt.c (with TESTING, so without its main) to reuse, unchanged, the CPU model's parameter table, seeded initialisation,
 * model-file reader (versions 3 and 5) and atomic writer. The CUDA trainer thereby shares the exact parameter
 * layout, init and checkpoint format of the CPU trainer. Not for: any maths (train_gpt.cu).
 */
#define TESTING
#include "train_gpt.c"

#include "models/gpt2_host.h"

Model *gpt2_host_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    return gpt2_create(spec, init_path, seed, B, T);
}

const ModelFamily *gpt2_host_family(void) { return &gpt2_family; }
