/* dev/cuda/emu/emu_raw.c - the emulator's bulk copies and fills, compiled WITHOUT AddressSanitizer and as plain
 * loops (built with -fno-tree-loop-distribute-patterns so they stay loops): the ASan runtime replaces memmove and
 * memset everywhere in the process, and its versions made copying a model's logits take minutes. emu.cpp checks
 * both ranges (device allocations, and __asan_region_is_poisoned under ASan) before calling these. */
#include <stddef.h>
#include <stdint.h>
void emu_raw_copy(void *d, const void *s, size_t n) {
    unsigned char *dd = (unsigned char *)d;
    const unsigned char *ss = (const unsigned char *)s;
    if (dd == ss || !n) return;
    if (dd < ss || dd >= ss + n) {
        for (size_t i = 0; i < n; i++) dd[i] = ss[i];
    } else {
        for (size_t i = n; i-- > 0;) dd[i] = ss[i];
    }
}
void emu_raw_fill(void *d, int v, size_t n) {
    unsigned char *dd = (unsigned char *)d;
    for (size_t i = 0; i < n; i++) dd[i] = (unsigned char)v;
}
