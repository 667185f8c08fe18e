/*
 * dev/cuda/attention_cudnn_graph.cu - builds cuda/attention_cudnn.cuh's forward and backward graphs at several
 * shapes (the kernel test's, GPT-2 124M's, head sizes 96 and 128) and reports how far each got. Runs anywhere
 * libcudnn loads, GPU or not (make test-cudnn-graphs):
 *   without a usable GPU: every tensor, pointwise, reduction, matmul and reshape descriptor must finalize, and the
 *     build must stop exactly where the operation graph needs a cuDNN handle (which needs a GPU). That checks the
 *     attribute names, types and counts of the whole graph on the host; it does not check that cuDNN accepts the
 *     graph, which is said in the output ("not checked");
 *   with a GPU: the full build, operation graph to execution plan, must succeed for the forward and at least one
 *     of the two backward graphs (deterministic, accumulating; the one refused is printed).
 * Exits non-zero on any failure. Not for: numerics (dev/cuda/attention_cudnn.cu).
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/attention_cudnn.cuh"

#ifndef ATTENTION_CUDNN
int main(void) {
    printf("FAIL attention_cudnn_graph: this build has no cuDNN attention (needs -DENABLE_CUDNN and bf16)\n");
    return 1;
}
#else
int main(void) {
    int ndev = 0;
    int gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
    cudaGetLastError();
    cudnnHandle_t handle = NULL;
    if (gpu && cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) handle = NULL;
    printf("cuDNN %zu; %s\n", cudnnGetVersion(),
           handle ? "a GPU and a cuDNN handle: full plans are built"
                  : "no usable GPU: descriptors only, the operation graph and plans are not checked");
    /* host-side rules of attention_cudnn.cuh: the refused releases and the per-layer statistics stride */
    {
        const size_t vs[] = {90000, 90900, 91000, 91001, 91002, 91600, 91900, 92200};
        const int bad[] = {0, 0, 1, 1, 0, 0, 0, 0};
        int ok = 1;
        for (int i = 0; i < 8; i++) ok &= cudnn_version_known_bad(vs[i]) == bad[i];
        check_true("cudnn_known_bad_versions_are_9_10_0_and_9_10_1", ok, "cudnn_version_known_bad disagrees");
        const int st[][3] = {{1, 3, 67}, {2, 4, 128}, {1, 1, 1}, {3, 5, 7}, {8, 12, 1024}};
        ok = 1;
        for (int i = 0; i < 5; i++) {
            size_t n = (size_t)st[i][0] * st[i][1] * st[i][2], s = cudnn_attention_stats_stride(st[i][0], st[i][1], st[i][2]);
            ok &= s % 4 == 0 && s >= n && s < n + 4;
        }
        check_true("cudnn_stats_stride_keeps_16_byte_alignment", ok, "a layer stride is not the least multiple of 4");
        printf("reshape mode: %s\n", cdnn_reshape_mode_set() ? "view (set)" :
#ifdef CDNN_RESHAPE_VIEW_ONLY
               "not set (the loaded cuDNN is older than 9.22)"
#else
               "not set (these headers have no reshape-mode attribute)"
#endif
        );
    }
    const int shapes[][4] = {{2, 128, 4, 64}, {1, 256, 4, 64}, {4, 1024, 12, 64}, {2, 512, 16, 96}, {2, 256, 8, 128}};
    int det_ok = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bwd = 0; bwd < 3; bwd++) { /* forward, deterministic backward, accumulating backward */
            static CdnnPlan p;
            memset(&p, 0, sizeof p);
            p.B = shapes[i][0]; p.T = shapes[i][1]; p.NH = shapes[i][2]; p.hs = shapes[i][3]; p.backward = bwd > 0;
            p.deterministic = bwd == 1;
            char why[CDNN_WHY] = "", name[96];
            CdnnBuild b = {&p, CUDNN_STATUS_SUCCESS, CDNN_UID_VIRTUAL, why,
                           bwd == 0 ? "forward" : bwd == 1 ? "deterministic backward" : "accumulating backward"};
            if (bwd) cdnn_build_backward(&b, handle, bwd == 1);
            else cdnn_build_forward(&b, handle);
            snprintf(name, sizeof name, "attention_cudnn_graph_%s_B%d_T%d_NH%d_hs%d",
                     bwd == 0 ? "forward" : bwd == 1 ? "backward_deterministic" : "backward_accumulating", p.B, p.T,
                     p.NH, p.hs);
            if (handle) {
                int ok = b.st == CUDNN_STATUS_SUCCESS && p.plan != NULL;
                if (bwd == 1) det_ok = ok;
                if (bwd == 1 && !ok) /* allowed: the accumulating graph is the fallback (checked next) */
                    printf("  %s: refused, the accumulating backward must build instead: %s\n", name, why);
                else if (check_true(name, ok || (bwd == 2 && det_ok), why))
                    printf("  %s: %s, %d descriptors, workspace %lld bytes\n", name, ok ? "built" : "refused (the "
                           "deterministic one serves)", p.ndesc, (long long)p.workspace);
            } else {
                /* the one expected stop: the graph's handle attribute (nothing before it may fail) */
                int at_handle = b.st != CUDNN_STATUS_SUCCESS && strstr(why, ": graph handle: ") != NULL;
                if (check_true(name, at_handle, why[0] ? why : "the build did not stop at the graph handle"))
                    printf("  %s: %d descriptors finalized on the host; operation graph not checked (no GPU)\n",
                           name, p.ndesc);
            }
            cdnn_plan_free(&p);
        }
    if (handle) cudnnDestroy(handle);
    return dev_failures ? 1 : 0;
}
#endif
