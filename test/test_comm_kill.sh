#!/usr/bin/env bash
# test/test_comm_kill.sh BIN - a rank that dies (SIGKILL) or fails (fatal()) while the others block in a
# collective must bring the whole mpirun job down, with a non-zero status, within 30 s (not hang).
bin=${1:-build/test_comm}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fails=0
for mode in die fatal; do
    start=$(date +%s)
    timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$bin" --$mode-rank 1 >/tmp/test_comm_kill.$$ 2>&1
    rc=$?
    dt=$(( $(date +%s) - start ))
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$dt" -le 30 ]; then
        echo "ok rank_${mode}_ends_the_job_nonzero_in_bounded_time (rc $rc, ${dt}s)"
    else
        echo "FAIL rank_${mode}_ends_the_job_nonzero_in_bounded_time: expected rc != 0 (and not the 124 of timeout) within 30 s, got rc $rc after ${dt}s"
        tail -5 /tmp/test_comm_kill.$$
        fails=1
    fi
    if [ "$mode" = fatal ] && [ "$rc" -ne 124 ]; then
        if grep -q "error: test_comm: rank 1 fails on purpose" /tmp/test_comm_kill.$$; then
            echo "ok fatal_message_reaches_the_user"
        else
            echo "FAIL fatal_message_reaches_the_user: expected the error line in the job output"; fails=1
        fi
    fi
    rm -f /tmp/test_comm_kill.$$
done
exit $fails
