/* stand-in for <cuda_bf16.h> in the CPU emulator: see emu.h */
#include "emu.h"
