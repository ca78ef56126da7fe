"""Chapter 03 rows: the reference copy-compute-copy pipeline against its ideal bound; CUDA graphs."""
from __future__ import annotations

from pathlib import Path

import numpy as np

N = (1 << 26) + 7      # floats: 256 MiB each way, not a multiple of the chunk or the block
CHUNKS, STREAMS, BLOCK = 16, 4, 256
SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "03_streams" / "process_chunk.cu"


def rows(ctx) -> list:
    import cupy
    import course
    from course.lessons import ch03
    k = course.compile(SOLUTION.read_text()).kernel("process_chunk")
    grid_cap = course.device_info().sm_count * 8

    def process(d_in, d_out, off, cnt, stream):
        k(min(grid_cap, -(-cnt // BLOCK)), BLOCK, d_in, d_out, off, cnt, stream=stream)

    bufs = ch03.PipelineBuffers(N, seed=21)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
    x = bufs.h_in.astype(np.float64)
    want = (x * (x * x - 0.5)).astype(np.float32)
    ch03.run_pipeline(process, bufs, n_streams=STREAMS, n_chunks=CHUNKS, streams=streams)
    course.assert_close(bufs.h_out, want, name="pipeline output")

    totals = [ch03.run_pipeline(process, bufs, n_streams=STREAMS, n_chunks=CHUNKS, streams=streams)
              for _ in range(7)]
    serial = [ch03.run_pipeline(process, bufs, n_streams=1, n_chunks=CHUNKS, streams=streams)
              for _ in range(3)]
    chunk = ch03.chunk_bounds(N, CHUNKS)[0][1]
    st = ch03.stage_times(process, bufs, chunk)
    ideal = ch03.ideal_pipeline_ms(st["h2d"], st["kernel"], st["d2h"], CHUNKS)
    total = float(np.median(totals))
    out = [ctx.row(f"reference pipeline, {CHUNKS} chunks on {STREAMS} streams, 256 MiB each way", total, "ms",
                   anchor="ideal h+k+d+(C-1)max from stage times", anchor_value=ideal, target=1.15,
                   higher_is_better=False,
                   note=f"stages per chunk: H2D {st['h2d']:.3f}, kernel {st['kernel']:.3f}, "
                        f"D2H {st['d2h']:.3f} ms"),
           ctx.row("same pipeline on one stream", float(np.median(serial)), "ms", anchor="pipeline on 4 streams",
                   anchor_value=total, note="speedup of overlap = this ratio")]
    bufs.h_out[:] = np.nan
    del bufs
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()

    demo = course.compile(ch03.SPIN_SRC)
    g = ch03.graph_vs_stream(demo.kernel("bump"), launches=2000)
    out.append(ctx.row("2000 tiny kernels: per-kernel time, stream launches", g["stream_us"], "us",
                       anchor="replayed CUDA graph", anchor_value=g["graph_us"], higher_is_better=False,
                       note=f"capture + instantiate {g['capture_ms']:.1f} ms once"))
    return out
