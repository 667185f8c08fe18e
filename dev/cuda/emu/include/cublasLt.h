/* stand-in for <cublasLt.h> in the CPU emulator: see emu_blas.h */
#include "emu_blas.h"
