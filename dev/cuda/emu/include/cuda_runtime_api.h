/* stand-in for <cuda_runtime_api.h> in the CPU emulator: see emu.h */
#include "emu.h"
