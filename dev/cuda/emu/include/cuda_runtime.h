/* stand-in for <cuda_runtime.h> in the CPU emulator: see emu.h */
#include "emu.h"
