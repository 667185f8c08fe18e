/* stand-in for <cuda.h> in the CPU emulator: see emu.h */
#include "emu.h"
