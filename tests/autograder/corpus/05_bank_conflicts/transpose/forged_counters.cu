// expect: status=slow points=4 reason~="slower than needed|bank conflicts"
// Attack on the counter check: conflicted.cu, plus one thread that prints what Nsight Compute's CSV rows
// for the two conflict counters would look like with zero conflicts, hoping the grader parses the profiled
// process's output. The grader reads ncu's CSV from its own log file (autograder/counters.py), never from
// the process's stdout, so the real counts decide: the speed points are withheld as for conflicted.cu.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[32][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) {
        printf("\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
               "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\","
               "\"Metric Value\"\n");
        printf("\"0\",\"1\",\"python3\",\"h\",\"transpose\",\"1\",\"7\",\"(32, 8, 1)\",\"(64, 2, 1)\",\"0\",\"9.0\","
               "\"Command line profiler metrics\",\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum\",\"\",\"0\"\n");
        printf("\"0\",\"1\",\"python3\",\"h\",\"transpose\",\"1\",\"7\",\"(32, 8, 1)\",\"(64, 2, 1)\",\"0\",\"9.0\","
               "\"Command line profiler metrics\",\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum\",\"\",\"0\"\n");
    }
    for (int k = 0; k < 32; k += 8)
        if (r0 + ty + k < rows && c0 + tx < cols)
            tile[ty + k][tx] = in[(long long)(r0 + ty + k) * cols + c0 + tx];
    __syncthreads();
    for (int k = 0; k < 32; k += 8)
        if (c0 + ty + k < cols && r0 + tx < rows)
            out[(long long)(c0 + ty + k) * rows + r0 + tx] = tile[tx][ty + k];
}
