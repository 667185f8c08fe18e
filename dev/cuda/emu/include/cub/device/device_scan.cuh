/* dev/cuda/emu/include/cub/device/device_scan.cuh - CUB's DeviceScan for the CPU emulator (see ../../emu.h):
 * ExclusiveSum as a sequential loop (CUB's result for integers) on stream s, with CUB's two-call protocol: a NULL temporary
 * storage pointer asks for its size; the storage and both arrays must be device memory. */
#ifndef EMU_CUB_DEVICE_SCAN_CUH
#define EMU_CUB_DEVICE_SCAN_CUH
#include "emu.h"
namespace cub {
struct DeviceScan {
    template <typename I, typename O, typename N>
    static cudaError_t ExclusiveSum(void *tmp, size_t &bytes, I in, O out, N n, cudaStream_t s = 0) {
        if (!tmp) { bytes = 256; return cudaSuccess; }
        if (bytes < 256 || emu::alloc_holding(tmp, 256, nullptr) < 0) emu::die("cub::DeviceScan::ExclusiveSum: temporary storage of %zu bytes at %p is not the size asked for or not device memory", bytes, tmp);
        if (n > 0 && (emu::alloc_holding(&in[0], sizeof(in[0]) * (size_t)n, nullptr) < 0 ||
                      emu::alloc_holding(&out[0], sizeof(out[0]) * (size_t)n, nullptr) < 0))
            emu::die("cub::DeviceScan::ExclusiveSum: %lld items run past the input or output device allocation", (long long)n);
        emu::enqueue(s, "cub::DeviceScan::ExclusiveSum", [in, out, n]() {
            typename std::remove_reference<decltype(out[0])>::type run = 0;
            for (N i = 0; i < n; i++) { auto v = in[i]; out[i] = run; run += v; }
        });
        return cudaSuccess;
    }
};
}  // namespace cub
#endif
