"""Hidden size cases: sizes drawn afresh from every grading's secret seed, besides a spec's public `sizes`.

A kernel that is right only at the sizes a spec lists (only when n % 4 == 0, or below a tile multiple plus
one) would pass if the tested sizes never changed. So each grading also tests ``ex.hidden_sizes`` cases
(default 3) drawn here: per size variable, values from a candidate set built around the exercise's units:
odd values, primes, multiples of 4, of 32 and of the tile, and values just above and just below a tile
multiple (by one, or by the variable's ``size_multiples`` unit), within the variable's allowed range. The
first three cases of a grading give every variable a value just off a tile multiple, an aligned one (a
multiple of 4, 32 or the tile) and an odd, prime or small one, in a shuffled order; magnitudes are mostly
log-uniform, so most cases are small and cheap and some reach the top of the range.

- The range of a variable is ``ex.size_range[name]`` (lo, hi), else derived from the literal public cases:
  lo = the smallest literal value (rounded up to the unit), hi = the largest literal value but at least
  `RANGE_TILES` tiles.
- A drawn case must pass what the public cases pass at load (positive shapes, a valid launch at
  ``launch_defaults``, `Constant` capacities), ``ex.size_rule`` if any, stay under `MAX_CASE_BYTES` and be
  no public case; a refused case is drawn again (at most `MAX_TRIES` times per case).

NumPy only: imported by the loader (which checks at load that every spec can draw its cases) and by the
grader's parent, never touching CUDA.
"""
from __future__ import annotations

import math
import zlib

import numpy as np

from .spec import CallExercise, Constant, L2Multiple, SpecError, _Array, shape_of

__all__ = ["CATEGORIES", "DEFAULT_TILE", "MAX_CASE_BYTES", "MAX_TRIES", "RANGE_TILES", "draw_cases", "case_problem",
           "bounds", "units", "tiles", "public_cases", "categories_of"]

DEFAULT_TILE = 32              # the tile of a size the spec gives none for
RANGE_TILES = 4                # a derived range reaches at least this many tiles
MAX_CASE_BYTES = 64 << 20      # a hidden case stays cheap: its arrays together stay under this
MAX_TRIES = 200                # draws per wanted case before giving up
# what a value of one size variable is drawn as; u is the variable's unit (size_multiples, else 1), t its tile
CATEGORIES = (
    "odd",      # an odd number of units (odd values when u = 1)
    "prime",    # u times a prime >= 3
    "mult4",    # a multiple of lcm(u, 4)
    "mult32",   # a multiple of lcm(u, 32)
    "tile",     # a multiple of the tile
    "tile+",    # just above a tile multiple: t * j + u
    "tile-",    # just below a tile multiple: t * j - u
    "small",    # one of the four smallest allowed values
)


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    return all(n % f for f in range(3, math.isqrt(n) + 1, 2))


def units(ex) -> dict:
    """Size name -> the unit its values are multiples of (``size_multiples``, else 1)."""
    mult = getattr(ex, "size_multiples", None) or {}
    return {k: int(mult.get(k, 1) or 1) for k in ex.size_names}


def tiles(ex) -> dict:
    """Size name -> its tile: ``ex.tile``, else `DEFAULT_TILE` (made a multiple of the unit)."""
    return {k: int(ex.tile.get(k) or math.lcm(DEFAULT_TILE, u)) for k, u in units(ex).items()}


def _literal_values(ex, name) -> list:
    return [int(c[name]) for c in ex.sizes if name in c and not isinstance(c[name], L2Multiple)]


def bounds(ex) -> dict:
    """Size name -> (lo, hi), the allowed range of hidden values, both multiples of the unit."""
    out, tile = {}, tiles(ex)
    for k, u in units(ex).items():
        if k in ex.size_range:
            lo, hi = (int(x) for x in ex.size_range[k])
        else:
            vals = _literal_values(ex, k) or [u]
            lo, hi = max(min(vals), u), max(max(vals), RANGE_TILES * tile[k])
        out[k] = (-(-lo // u) * u, hi // u * u)
    return out


def public_cases(ex) -> set:
    """The public cases with literal values only, as tuples in ``size_names`` order."""
    names = ex.size_names
    return {tuple(int(c[k]) for k in names) for c in ex.sizes
            if set(c) == set(names) and not any(isinstance(v, L2Multiple) for v in c.values())}


class _Context:
    """What checking many cases of one exercise needs, computed once."""

    def __init__(self, ex):
        self.names, self.units, self.tiles, self.bounds = ex.size_names, units(ex), tiles(ex), bounds(ex)
        self.public = public_cases(ex)
        self.capacity = ({} if isinstance(ex, CallExercise) else
                         {c.name: ex.constant_capacity(c) for c in ex.constants})


def _case_bytes(ex, sizes: dict) -> int:
    if isinstance(ex, CallExercise):
        return int(ex.case_bytes(dict(sizes))) if ex.case_bytes is not None else 0
    return ex.array_bytes(sizes) + sum(math.prod(shape_of(c.shape, sizes)) * c.np_dtype.itemsize
                                       for c in ex.constants)


def case_problem(ex, sizes: dict, ctx: _Context | None = None) -> str:
    """'' if ``sizes`` is an allowed hidden case of ``ex``, else why not."""
    from .spec import check_launch_result
    ctx = ctx or _Context(ex)
    if set(sizes) != set(ctx.names):
        return f"the case has the sizes {sorted(sizes)}, not {sorted(ctx.names)}"
    for k in ctx.names:
        v, u, (lo, hi) = sizes[k], ctx.units[k], ctx.bounds[k]
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            return f"{k} = {v!r} is not a positive int"
        if v % u:
            return f"{k} = {v} is not a multiple of {u} (size_multiples)"
        if not lo <= v <= hi:
            return f"{k} = {v} is outside its range [{lo}, {hi}]"
    sizes = {k: int(sizes[k]) for k in ctx.names}
    if not isinstance(ex, CallExercise):
        for p in ex.params:
            if isinstance(p, _Array):
                try:
                    shape = shape_of(p.shape, sizes)
                except Exception as exc:  # noqa: BLE001 - any failure refuses the case, saying why
                    return f"{p.name}: shape {p.shape!r} fails: {type(exc).__name__}: {exc}"
                if any(d < 1 for d in shape):
                    return f"{p.name}: shape {p.shape!r} is {shape}"
                if isinstance(p, Constant) and math.prod(shape) > ctx.capacity[p.name]:
                    return (f"Constant {p.name!r} would need {math.prod(shape)} elements, more than the "
                            f"{ctx.capacity[p.name]} its __constant__ symbol holds")
        try:
            result = ex.launch(dict(sizes), dict(ex.launch_defaults))
        except Exception as exc:  # noqa: BLE001
            return f"launch raised {type(exc).__name__}: {exc}"
        problem = check_launch_result(result)
        if problem:
            return f"launch {problem}"
    if ex.size_rule is not None:
        try:
            why = ex.size_rule(dict(sizes))
        except Exception as exc:  # noqa: BLE001
            return f"size_rule raised {type(exc).__name__}: {exc}"
        if not isinstance(why, str):
            return f"size_rule should return '' or why the case is refused; got {why!r}"
        if why:
            return f"size_rule: {why}"
    nbytes = _case_bytes(ex, sizes)
    if nbytes > MAX_CASE_BYTES:
        return f"its arrays take {nbytes} bytes, more than the {MAX_CASE_BYTES >> 20} MiB a hidden case may"
    return ""


def _pick(rng, jlo: int, jhi: int) -> int:
    """An int in [jlo, jhi]: log-uniform from jlo two times in three (cheap cases), else uniform."""
    n = jhi - jlo + 1
    if rng.random() < 2 / 3:
        return jlo + min(int(math.exp(rng.uniform(0.0, math.log(n + 1)))) - 1, n - 1)
    return jlo + int(rng.integers(0, n))


def _stepped(rng, lo, hi, step, off=0):
    """A value step * j + off within [lo, hi], or None if there is none."""
    jlo, jhi = -(-(lo - off) // step), (hi - off) // step
    return None if jlo > jhi else step * _pick(rng, jlo, jhi) + off


def _value(rng, category, lo, hi, u, t):
    """One value of a category within [lo, hi] (multiples of u), or None if the range has none."""
    if category == "odd":
        return _stepped(rng, lo, hi, 2 * u, u)
    if category == "prime":
        plo, phi = max(-(-lo // u), 3), hi // u
        if plo > phi:
            return None
        p = _pick(rng, plo, phi)
        ups = (q for q in range(p, phi + 1) if _is_prime(q))
        downs = (q for q in range(p - 1, plo - 1, -1) if _is_prime(q))
        q = next(ups, None) or next(downs, None)
        return None if q is None else u * q
    if category in ("mult4", "mult32"):
        return _stepped(rng, lo, hi, math.lcm(u, 4 if category == "mult4" else 32))
    if category == "tile":
        return _stepped(rng, lo, hi, t)
    if category == "tile+":
        return _stepped(rng, max(lo, t + u), hi, t, u)
    if category == "tile-":
        return _stepped(rng, max(lo, t - u, 1), hi, t, t - u)
    if category == "small":
        return _stepped(rng, lo, min(hi, lo + 3 * u), u)
    raise ValueError(f"unknown category {category!r}")


def categories_of(value: int, unit: int = 1, tile: int = DEFAULT_TILE) -> set:
    """The categories ``value`` belongs to (for tests and reports); 'small' is left out (it needs lo)."""
    out = set()
    if (value // unit) % 2 and value % unit == 0:
        out.add("odd")
    if value % unit == 0 and _is_prime(value // unit) and value // unit >= 3:
        out.add("prime")
    for name, step in (("mult4", math.lcm(unit, 4)), ("mult32", math.lcm(unit, 32)), ("tile", tile)):
        if value % step == 0:
            out.add(name)
    if value > tile and value % tile == unit % tile:
        out.add("tile+")
    if value % tile == (tile - unit) % tile:
        out.add("tile-")
    return out


# a grading's plan per variable: its first cases take one category from each group (in a shuffled order), so
# that every grading tests a value just off a tile multiple and an aligned one (a multiple of 4, 32 or the
# tile), whatever else it draws; later cases take the remaining categories
_GROUPS = (("tile+", "tile-"), ("tile", "mult32", "mult4"), ("odd", "prime", "small"))


_KEEP_ALL = 4                  # redraws of a refused case that keep the whole plan


def _plan(rng) -> list:
    first = [str(rng.choice(g)) for g in _GROUPS]
    rest = [c for c in rng.permutation(CATEGORIES) if c not in first]
    return [first[i] for i in rng.permutation(len(first))] + rest


def _planned(rng, names: list, since: int) -> set:
    """The variables that keep their planned category in a case's draw after ``since`` refusals: all for a few
    draws (a new value of the same kind: a public duplicate or too many bytes is often gone then), then all but
    one, each in turn (a plan that another variable's value cannot go with, such as a small n with many taps,
    gives way without the rest of the plan), then each by chance, then none."""
    if since < _KEEP_ALL:
        return set(names)
    if since < _KEEP_ALL + 4 * len(names):
        return set(names) - {names[(since - _KEEP_ALL) % len(names)]}
    if since < MAX_TRIES // 4:
        return {k for k in names if rng.random() < 0.5}
    return set()


def _draw_one(rng, ctx, plan: dict, i: int, since: int) -> dict:
    case, planned = {}, _planned(rng, ctx.names, since)
    for k in ctx.names:
        (lo, hi), u, t = ctx.bounds[k], ctx.units[k], ctx.tiles[k]
        order = [plan[k][i % len(CATEGORIES)]] if k in planned else []
        order += list(rng.permutation(CATEGORIES))
        for category in order:
            v = _value(rng, category, lo, hi, u, t)
            if v is not None:
                break
        else:
            v = _stepped(rng, lo, hi, u)
        case[k] = int(v)
    return case


def _rng(ex, seed: int) -> np.random.Generator:
    # the exercise's name is mixed in (crc32: the same in every process), so exercises draw different cases
    salt = zlib.crc32(f"{getattr(ex, 'chapter', '')}:{ex.name}".encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed) % (1 << 64), int(seed) // (1 << 64) % (1 << 64),
                                                         salt]))


def draw_cases(ex, seed: int, count: int | None = None) -> list:
    """``count`` (default ``ex.hidden_sizes``) hidden size cases of ``ex`` for the grading run's ``seed``.

    Deterministic for a seed; a list of dicts over exactly ``ex.size_names`` with concrete ints, each allowed
    (`case_problem` says ''), none a public case, no two alike. Raises `SpecError` when the spec's ranges and
    rules leave too few cases to draw.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed should be an int; got {seed!r}")
    count = int(ex.hidden_sizes if count is None else count)
    if count <= 0:
        return []
    rng, ctx = _rng(ex, seed), _Context(ex)
    for k, (lo, hi) in ctx.bounds.items():
        if lo > hi:
            raise SpecError(f"size {k!r}: its range holds no multiple of {ctx.units[k]} (lo {lo} > hi {hi})")
    plan = {k: _plan(rng) for k in ctx.names}
    cases, seen, last, tries, since = [], set(ctx.public), "", 0, 0
    while len(cases) < count:
        if tries >= MAX_TRIES * count:
            raise SpecError(f"could draw only {len(cases)} of {count} hidden size cases in {tries} tries "
                            f"(seed {seed}); the last draw was refused: {last}")
        case = _draw_one(rng, ctx, plan, len(cases), since)
        tries, since = tries + 1, since + 1
        key = tuple(case[k] for k in ctx.names)
        last = ("it repeats a public case" if key in ctx.public else "it repeats a drawn case" if key in seen
                else case_problem(ex, case, ctx))
        if last:
            last = f"{ex.size_label(case)}: {last}"
            continue
        seen.add(key)
        cases.append(case)
        since = 0
    return cases
