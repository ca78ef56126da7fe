# expect: status=slow points=5
# Right, but written as a scalar loop: one element per step, so each program walks its row one load at a time and
# the whole block waits on every load's latency. Full-width tiles (tl.arange) are what make Triton fast.
import triton
import triton.language as tl

LAUNCH = {"BLOCK": 1024, "num_warps": 1}


@triton.jit
def softmax(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    top = -float("inf")
    total = 0.0
    for c in range(0, cols):
        v = tl.load(x_ptr + row * cols + c)
        new_top = tl.maximum(top, v)
        total = total * tl.exp(top - new_top) + tl.exp(v - new_top)
        top = new_top
    for c in range(0, cols):
        v = tl.load(x_ptr + row * cols + c)
        tl.store(y_ptr + row * cols + c, tl.exp(v - top) / total)
