/* trainer/sampler.c - see sampler.h. */
#include "trainer/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "common/util.h"

static int argmax(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int sample_token(const float *logits, int V, float temperature, int top_k, Rng *rng) {
    if (temperature <= 0.0f) return argmax(logits, V);
    int K = (top_k > 0 && top_k < V) ? top_k : V;
    /* candidate ids: the K best by (logit desc, id asc); selection sort is O(K V) but K is small when < V */
    int *ids = xmalloc((size_t)K * sizeof(int), "sampler candidates");
    if (K == V) {
        for (int i = 0; i < V; i++) ids[i] = i;
    } else {
        char *taken = xcalloc((size_t)V, 1, "sampler flags");
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int i = 0; i < V; i++)
                if (!taken[i] && (best < 0 || logits[i] > logits[best])) best = i;
            taken[best] = 1;
            ids[k] = best;
        }
        free(taken);
    }
    double maxl = -INFINITY;
    for (int k = 0; k < K; k++)
        if (logits[ids[k]] > maxl) maxl = logits[ids[k]];
    double *p = xmalloc((size_t)K * sizeof(double), "sampler probabilities");
    double sum = 0.0;
    for (int k = 0; k < K; k++) {
        p[k] = exp(((double)logits[ids[k]] - maxl) / temperature);
        sum += p[k];
    }
    double u = (double)rng_uniform(rng) * sum, acc = 0.0;
    int out = ids[K - 1];
    for (int k = 0; k < K; k++) {
        acc += p[k];
        if (u < acc) {
            out = ids[k];
            break;
        }
    }
    free(p);
    free(ids);
    return out;
}

size_t sample_context(const int32_t *prompt, size_t n_prompt, int32_t bos, int own_bos, int32_t *out, int *lead) {
    *lead = n_prompt == 0 || (own_bos && prompt[0] != bos);
    size_t n = 0;
    if (*lead) out[n++] = bos;
    for (size_t i = 0; i < n_prompt; i++) out[n++] = prompt[i];
    return n;
}
