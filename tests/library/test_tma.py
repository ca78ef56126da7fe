"""course.tma: what a TMA map may describe (CPU), the swizzle model (CPU), and on a Hopper GPU a box copied by
the copy engine into shared memory through an mbarrier, byte for byte where `swizzled` says, for every
swizzle mode, including a box that hangs over the array's edge (filled with zeros)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from hopper_kernels import TMA_PRELUDE
from repo_helpers import import_course

course = import_course()

# One box, loaded by the TMA into shared memory and copied out byte by byte as it lies there.
BOX_KERNEL = TMA_PRELUDE + r'''
extern "C" __global__ void tma_box(const __grid_constant__ TensorMap map, unsigned char* out, int bytes,
                                   int row0, int col0)
{
    __shared__ alignas(1024) unsigned char tile[16384];   // 1024-byte aligned: the 128B swizzle's repeat
    __shared__ alignas(8) unsigned long long bar;
    if (threadIdx.x == 0)
        barrier_init(&bar);
    __syncthreads();
    if (threadIdx.x == 0) {
        barrier_expect(&bar, bytes);
        tma_load_2d(tile, &map, col0, row0, &bar);
    }
    barrier_wait(&bar, 0);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x)
        out[i] = tile[i];
}
'''


def test_the_box_kernel_compiles_for_hopper():
    prog = course.compile_for_arch(BOX_KERNEL, "sm_90")
    assert "cp.async.bulk.tensor.2d" in prog.ptx and "mbarrier.try_wait" in prog.ptx
    assert "UTMALDG" in prog.sass()          # the copy engine's load in the machine code


class _Fake:
    """What _check reads of a CuPy array, without a GPU."""
    def __init__(self, shape, dtype=np.float32, pitch=None, ptr=0x1000):
        self.ndim, self.shape, self.dtype = len(shape), shape, np.dtype(dtype)
        self.strides = (pitch or shape[-1] * self.dtype.itemsize, self.dtype.itemsize)[-len(shape):]
        self.data = type("P", (), {"ptr": ptr})()


@pytest.mark.parametrize("array,box,swizzle,says", [
    (_Fake((64, 30)), (8, 32), "none", "16-byte aligned base and row pitch"),
    (_Fake((64, 64), ptr=0x1004), (8, 32), "none", "16-byte aligned"),
    (_Fake((64, 64)), (8, 33), "none", "multiple of 16 bytes"),
    (_Fake((64, 64)), (8, 64), "128B", "at most 128 bytes"),
    (_Fake((64, 64)), (300, 32), "none", "each 1..256"),
    (_Fake((64,)), (8, 32), "none", "2-D array"),
    (_Fake((64, 64)), (8, 32), "256B", "one of none"),
])
def test_what_tma_cannot_describe_is_refused_with_the_reason(array, box, swizzle, says):
    with pytest.raises(ValueError, match=says):
        course.tma.tensor_map(array, box, swizzle=swizzle)


def test_without_cuda_python_the_map_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(course.FeatureUnavailable, match="pip install 'cuda-python"):
        course.tma.tensor_map(_Fake((64, 64)), (8, 32))


def test_swizzle_model_permutes_chunks_within_lines():
    """128B: chunk c of 128-byte line r lands in chunk c ^ (r % 8); bytes inside a chunk keep their order; 64B
    and 32B use 2 and 1 bits of the line index; every mode is a permutation of each 1024-byte block."""
    o = np.arange(1024)
    sw = course.tma.swizzled(o, "128B")
    assert sorted(sw) == list(o)
    line, chunk, byte = o // 128, (o % 128) // 16, o % 16
    assert (sw == line * 128 + (chunk ^ (line % 8)) * 16 + byte).all()
    for mode, bits in (("64B", 3), ("32B", 1)):
        got = course.tma.swizzled(o, mode)
        assert sorted(got) == list(o) and ((got ^ o) & ~(bits << 4) == 0).all()
    assert (course.tma.swizzled(o, "none") == o).all()


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle,box", [("none", (16, 24)), ("32B", (16, 8)), ("64B", (16, 16)), ("128B", (32, 32))])
def test_the_copy_engine_puts_every_byte_where_the_model_says(swizzle, box):
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    if course.device_info().cc < (9, 0):
        pytest.skip("TMA needs compute capability 9.0")
    pytest.importorskip("cuda.bindings", reason="tensor maps need cuda-python")
    import cupy
    rows, cols = 100, 72                                  # not multiples of the box: the last box hangs over
    a = cupy.arange(rows * cols, dtype=cupy.float32).reshape(rows, cols) + 1
    tmap = course.tma.tensor_map(a, box, swizzle=swizzle)
    k = course.compile(BOX_KERNEL).kernel("tma_box")
    nbytes = box[0] * box[1] * 4
    for row0, col0 in ((0, 0), (box[0], box[1]), (rows - box[0] // 2, cols - box[1] // 2)):
        out = cupy.full(nbytes, 0xAB, dtype=cupy.uint8)
        k(1, 128, tmap, out, nbytes, row0, col0)
        want = np.zeros(box, np.float32)                   # out of range: zeros
        part = a[row0:row0 + box[0], col0:col0 + box[1]].get()
        want[:part.shape[0], :part.shape[1]] = part
        flat = want.view(np.uint8).reshape(-1)
        placed = np.empty_like(flat)
        placed[course.tma.swizzled(np.arange(nbytes), swizzle)] = flat
        assert (out.get() == placed).all(), (swizzle, row0, col0)
