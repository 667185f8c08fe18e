#!/usr/bin/env bash
# dev/cuda/emu/expect_fail.sh SELFTEST CASE - runs one deliberate bug of the emulator's self-test (selftest.cu)
# (or, for CASE old_driver, any emulated test program under a CUDA 12.8 driver: it must stop with the one line
# that names both versions and the driver it needs, cuda/common.cuh's cuda_no_device_why)
# and prints "ok emu_reports_CASE" when the program fails with the message expected for that bug, else
# "FAIL emu_reports_CASE: ..." with the end of its output. The program's own output is shown indented, so
# test/run.sh counts only this script's verdict.
bin=$1 case=$2
case $case in
    oob_write|oob_read) want='heap-buffer-overflow' ;;
    exited_lane_shuffle) want='which has exited' ;;
    syncthreads_after_exit) want='while [0-9]* had exited' ;;
    divergent_syncthreads) want='different __syncthreads' ;;
    host_pointer_argument) want='a host pointer the GPU cannot read' ;;
    memcpy_direction) want='is device memory where the copy direction says host' ;;
    lt_leading_dimension) want='runs past the end of its device allocation' ;;
    lt_alignment) want='declared minimum of 256 bytes' ;;
    launch_bounds) want='__launch_bounds__' ;;
    unordered_streams_raw|unordered_streams_war|host_reads_before_sync) want='values read stale' ;;
    old_driver) want='driver supports CUDA 12.8, this build.s runtime is CUDA 13.0 (CUDA 13 needs an NVIDIA driver >= 580)' ;;
    *) echo "error: expect_fail.sh: no expectation for case '$case'; add one"; exit 2 ;;
esac
arg=$case streams=defer
[ "$case" = launch_bounds ] && arg=ok   # the ok run launches beyond __launch_bounds__ and checks the error code
case $case in unordered_streams_*) streams=reverse ;; esac   # only that order runs the later operation first
drv=13000; [ "$case" = old_driver ] && drv=12080   # a CUDA 12.8 driver (the 570 series) under the CUDA 13 runtime
out=$(EMU_DRIVER_VERSION=$drv EMU_STREAMS=$streams ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 "$bin" "$arg" 2>&1); rc=$?
echo "$out" | tail -n 40 | sed 's/^/  | /'
if [ "$case" = launch_bounds ]; then
    if [ $rc -eq 0 ] && echo "$out" | grep -q "$want"; then echo "ok emu_reports_$case"; exit 0; fi
    echo "FAIL emu_reports_$case: exit status $rc, message /$want/ $(echo "$out" | grep -c "$want") times"; exit 1
fi
if [ $rc -ne 0 ] && echo "$out" | grep -q "$want"; then echo "ok emu_reports_$case (exit status $rc)"; exit 0; fi
echo "FAIL emu_reports_$case: expected a failure reporting /$want/; got exit status $rc and $(echo "$out" | grep -c "$want") such lines"
exit 1
