# expect: status=failed points=0
# The released stub with its body left empty: nothing is written, every output keeps its poison.
import triton
import triton.language as tl

LAUNCH = {"BLOCK": 1024, "num_warps": 4}


@triton.jit
def softmax(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    pass
