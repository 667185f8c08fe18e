/*
 * common/hash.h - FNV-1a 64 (Fowler, Noll, Vo; offset basis 0xcbf29ce484222325, prime 0x100000001b3, per
 * draft-eastlake-fnv): a fixed, documented hash, the same on every machine, for what must agree across ranks or
 * runs (the ranks-in-sync check of the update, the training/validation split of `tok shards`). Header-only, so the
 * CUDA host code (cuda/dist.cu, compiled as C++) uses the same definition. Not for: anything adversarial or large
 * enough to want speed (the shard hashes use xxHash).
 */
#ifndef COMMON_HASH_H
#define COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The FNV-1a 64 state before any byte. */
#define HASH_FNV1A64_OFFSET 0xcbf29ce484222325ull

/* FNV-1a 64 of n bytes at p, continuing from h (start with HASH_FNV1A64_OFFSET; the ranks-in-sync checks start
 * from their own fixed value, which only has to be the same on every rank); chain calls to hash several buffers
 * as one. */
static inline uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
