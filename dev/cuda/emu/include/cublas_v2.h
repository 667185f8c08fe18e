/* stand-in for <cublas_v2.h> in the CPU emulator: see emu_blas.h */
#include "emu_blas.h"
