"""Chapter 01, first kernel: SAXPY (1D, grid-stride) and RGB to gray (2D, bounds checks).

Reference kernels: solutions/01_first_kernel/{saxpy,rgb_to_gray}.cu. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, InOut, Out, Points, Scalar, Tolerance, Uniform, cdiv


def saxpy_reference(v):
    # float32 throughout, as the kernel computes (with or without a fused multiply-add: see the tolerance)
    return {"y": v["a"] * v["x"] + v["y"]}


def saxpy_launch(sizes, cfg):
    block = cfg["block"]
    return cdiv(sizes["n"], block), block, 0


def gray_reference(v):
    rgb = v["rgb"].astype(np.uint32)
    g = (77 * rgb[..., 0] + 150 * rgb[..., 1] + 29 * rgb[..., 2] + 128) >> 8
    return {"gray": g.astype(np.uint8)}


def gray_launch(sizes, cfg):
    bx, by = cfg["block"]
    return (cdiv(sizes["width"], bx), cdiv(sizes["height"], by)), (bx, by), 0


EXERCISES = [
    Exercise(
        name="saxpy",
        kernel="saxpy",
        source_file="saxpy.cu",
        description="y = a * x + y for n floats, with a grid-stride loop",
        params=[Scalar("n", "int", "n"), Scalar("a", "float", Uniform(0.5, 2.0)),
                In("x", "float32", "n"), InOut("y", "float32", "n")],
        sizes=[{"n": 1}, {"n": 2}, {"n": 33}, {"n": 1_000_003}, {"n": LARGER_THAN_L2}],
        launch=saxpy_launch,
        launch_defaults={"block": 256},
        reference=saxpy_reference,
        # A kernel's fused multiply-add and NumPy's separate roundings differ by up to 2.4e-7 (half an ulp
        # of |a x| <= 2, half an ulp of the sum <= 3). The default absolute term scales with the largest
        # output, which at n = 1 can be tiny when a x and y cancel: a correct kernel failed there in 1 of
        # ~2,400 gradings. A fixed 1e-6 covers the rounding and still fails a half-precision kernel.
        tolerance=Tolerance(rtol=1e-5, atol=1e-6),
        points=Points(correctness=6, speed=4),
        speed_threshold=0.8,
        floor_bytes=lambda s: 12 * s["n"],
        timeout_s=10,
        # hidden sizes around the default block of 256: a kernel without its bounds test fails at 256 j + 1
        tile={"n": 256},
    ),
    Exercise(
        name="rgb_to_gray",
        kernel="rgb_to_gray",
        source_file="rgb_to_gray.cu",
        description="8-bit RGB to 8-bit gray on a 2D grid, exact integer formula",
        params=[In("rgb", "uint8", ("height", "width", 3)), Out("gray", "uint8", ("height", "width")),
                Scalar("width", "int", "width"), Scalar("height", "int", "height")],
        sizes=[{"width": 1, "height": 1}, {"width": 37, "height": 1001}, {"width": 1920, "height": 1081},
               {"width": 4099, "height": LARGER_THAN_L2}],
        launch=gray_launch,
        launch_defaults={"block": (32, 8)},
        reference=gray_reference,
        tolerance="exact",
        points=Points(correctness=6, speed=4),
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        floor_bytes=lambda s: 4 * s["width"] * s["height"],
        timeout_s=10,
        # hidden sizes around the (32, 8) block: either bounds test missing shows just above a multiple
        tile={"width": 32, "height": 8},
    ),
]
