/* stand-in for <cub/cub.cuh> in the CPU emulator: only DeviceScan::ExclusiveSum */
#include "cub/device/device_scan.cuh"
