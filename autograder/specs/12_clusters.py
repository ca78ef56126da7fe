"""Chapter 12 (cooperative groups and thread-block clusters): a 16,384-bin histogram in a cluster's
distributed shared memory, and a float sum through cooperative groups' warp tiles.

cluster_histogram needs sm_90 (thread-block clusters): on an older GPU it is skipped and its points are left
out of the total. Its reference sets the cluster size at compile time (`__cluster_dims__(CLUSTER, 1, 1)`), so
the grader launches it like any kernel; the launch makes the grid a multiple of the LAUNCH key `cluster`
(default 4, the reference's CLUSTER), which a kernel built for another cluster size changes with its LAUNCH
line. Inputs: values in [0, 16384) with hot bins (below), so some counters see real contention. Speed points
also need distributed shared memory in the kernel's SASS (technique check "distributed_shared").

tile_reduce: *out += sum of x in one launch, each block adding its total into the zeroed *out with one float
atomic. The order of those atomics changes from run to run, so the result is compared against the tolerance
(deterministic=False). The inputs are positive, so |sum| equals the sum of |x|, the scale float rounding grows
with, and rtol 1e-4 of it is scale-aware: a parallel sum (per-thread partials, warp and block trees, 1,024
block totals added into a running float) stays under 1e-6 typically and 4e-5 at worst at the timing size
(about 10^8 values), while a lost or doubled element shows up to about ten thousand values.
Reference kernels: solutions/12_clusters/. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Tolerance, Uniform, cdiv

BINS = 16384
CLUSTER = 4              # the reference's __cluster_dims__; LAUNCH key "cluster"
HOT_BINS = np.arange(16) * (BINS // 16) + 5   # one in every 1,024 bins: each block's slice holds some
HOT_SHARE = 0.25         # a quarter of all values fall in the 16 hot bins (1.6% each); the rest uniform
REDUCE_MAX_BLOCKS = 1024


def hot_bins(rng, shape, dtype):
    """Values in [0, 16384), each drawn alone: a hot bin with probability HOT_SHARE, else any bin."""
    uniform = rng.integers(0, BINS, size=shape)
    hot = HOT_BINS[rng.integers(0, HOT_BINS.size, size=shape)]
    return np.where(rng.random(shape) < HOT_SHARE, hot, uniform).astype(dtype)


def _block(cfg):
    block = cfg["block"]
    if not isinstance(block, int) or block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"block should be a multiple of 32 from 32 to 1024; got {block!r}")
    return block


def histogram_launch(sizes, cfg):
    """ceil(n / (16 x block x cluster)) clusters, at most max_clusters, of `cluster` blocks each."""
    block, cluster = _block(cfg), cfg["cluster"]
    if cluster not in (1, 2, 4, 8):
        raise ValueError(f"cluster should be 1, 2, 4 or 8, the x of your kernel's __cluster_dims__(x, 1, 1) (a "
                         f"power of two, so the 16,384 bins split evenly, and at most 8, the portable limit); "
                         f"got {cluster!r}")
    if not isinstance(cfg["max_clusters"], int) or cfg["max_clusters"] < 1:
        raise ValueError(f"max_clusters should be a positive int; got {cfg['max_clusters']!r}")
    clusters = min(cdiv(sizes["n"], 16 * block * cluster), cfg["max_clusters"])
    return clusters * cluster, block, 0


def reduce_launch(sizes, cfg):
    block = _block(cfg)
    return min(cdiv(sizes["n"], 16 * block), REDUCE_MAX_BLOCKS), block, 0


def histogram_reference(v):
    return {"hist": np.bincount(v["data"], minlength=BINS)[:BINS]}


def reduce_reference(v):
    return {"out": np.array([v["x"].astype(np.float64).sum()])}


SIZES = [{"n": 1}, {"n": 33}, {"n": 4097}, {"n": 1_000_003}, {"n": LARGER_THAN_L2}]

EXERCISES = [
    Exercise(
        name="cluster_histogram",
        kernel="cluster_histogram",
        source_file="cluster_histogram.cu",
        description=("hist[b] += count of data[i] == b for 16,384 bins, data in [0, 16384) with hot bins; hist "
                     "arrives zeroed. A thread-block cluster (__cluster_dims__) keeps the bins in its blocks' "
                     "shared memory, each block owning a slice, all adding through distributed shared memory. "
                     "Grid: min(ceil(n / (16 block cluster)), max_clusters) x cluster blocks (defaults block 512, "
                     "cluster 4, max_clusters 128). Needs sm_90."),
        params=[In("data", np.uint32, "n", gen=hot_bins), Out("hist", np.uint32, BINS, fill=0),
                Scalar("n", "int", "n")],
        sizes=SIZES,
        launch=histogram_launch,
        # 128 clusters of 4 x 512 threads: 512 blocks, within the 4 blocks (2,048 threads, 64 KiB of slices)
        # that each of an H100's 132 SMs holds at once, so the grid runs in one wave
        launch_defaults={"block": 512, "cluster": CLUSTER, "max_clusters": 128},
        reference=histogram_reference,
        points=Points(correctness=6, speed=4),
        # Calibration. The technique check below withholds the speed points of any kernel without DSMEM, so
        # the chapter's single-block versions (hist_global, every add a global atomic; hist_private, all bins
        # in one block's shared memory) earn none however fast they run, and the threshold need not separate
        # them. The chapter's hist_cluster takes its slice as dynamic shared memory, which this launch does not
        # give (0 bytes): as it is, it faults (corpus lesson_dynamic_shared.cu), so SPEC_FORMAT.md's lesson rule
        # does not reach it. 0.8 leaves the reference its 20% of room; half the points from 0.5 for a cluster
        # kernel that loses time elsewhere (too few clusters, a barrier per value). To be measured on the H100
        # by the corpus's cluster2.cu and the reference (tests/autograder/test_corpus_gpu.py).
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        techniques=("distributed_shared",),
        floor_bytes=lambda s: 4 * s["n"] + 4 * BINS,
        min_cc=(9, 0),
        # hidden sizes around a cluster's share of the default launch (512 threads x 16 values x 4 blocks),
        # where the last cluster is partly idle; odd n tests the uint4 tail
        tile={"n": 16 * 512 * CLUSTER},
    ),
    Exercise(
        name="tile_reduce",
        kernel="tile_reduce",
        source_file="tile_reduce.cu",
        description=("*out += x[0] + ... + x[n-1]; *out arrives zeroed. Grid-stride over min(ceil(n / (16 block)), "
                     "1024) blocks of `block` threads (default 256, a multiple of 32); each block reduces its "
                     "values with cooperative groups (tiled_partition<32>, cg::reduce) and adds its total with one "
                     "atomicAdd. Any arch."),
        params=[In("x", np.float32, "n", gen=Uniform(0.0, 1.0)), Out("out", np.float32, 1, fill=0),
                Scalar("n", "int", "n")],
        sizes=SIZES,
        launch=reduce_launch,
        launch_defaults={"block": 256},
        reference=reduce_reference,
        tolerance=Tolerance(rtol=1e-4),
        deterministic=False,
        points=Points(correctness=6, speed=4),
        # A streaming sum is bound by reading x: any kernel that keeps the loads flowing and adds one value per
        # block reaches the reference (chapter 06's reduce5_grid_stride recorded 1.02 of its float4 reference).
        # The speed points separate those from the usual slow forms: an atomic per element or per warp into one
        # address, a serial loop per block (corpus serial.cu), a grid that leaves SMs idle. 0.8 gives the
        # reference its 20% of room; half the points from 0.5. SPEC_FORMAT.md's lesson rule: no chapter 12
        # kernel runs under this launch as it is and passes. sum_partials and tile_sum_cg32 write one value per
        # block or tile (out holds one), sum_grid_sync takes four parameters, and reduce_cluster needs a grid
        # that is a multiple of 8 and covers 2 x blockDim.x values per block without a grid stride.
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        floor_bytes=lambda s: 4 * s["n"],
        tile={"n": 16 * 256},    # hidden sizes around a default block's share (256 threads x 16 floats)
    ),
]
