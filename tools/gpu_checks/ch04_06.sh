#!/usr/bin/env bash
# GPU checks for chapters 04-06 (coalescing, bank conflicts, building blocks), for a machine with a GPU.
#
#   bash tools/gpu_checks/ch04_06.sh                  all steps, in this order
#   STEPS="tests bench" bash tools/gpu_checks/ch04_06.sh
#
# Steps (about 25 minutes in all on an H100; logs in $OUT, default /tmp/gpu_checks_ch04_06):
#   tests      GPU tests of the lesson helpers, lesson kernels and graded references at odd sizes,
#              launched twice where they keep state between launches (tests/lessons/test_ch0[456].py -m gpu)
#   bench      python -m benchmarks --only 04_coalescing,05_bank_conflicts,06_building_blocks
#              (writes benchmarks/results/<gpu>.{json,md}; the targets of issue 5 are rows with a target)
#   grade      references full marks, nbgrader stubs zero, and the calibration corpus in
#              tools/gpu_checks/ch04_06/corpus/ (slow, conflicted and broken kernels get their verdicts;
#              'info' rows print the ratio that calibrates a threshold)
#   sweeps     records the four widget sweeps to benchmarks/results/sweeps/ for CPU-only replay
#   notebooks  executes chapters/0[456]_*.ipynb top to bottom (and the exercise notebooks when
#              EXERCISE_NOTEBOOKS=1: they grade every exercise twice, about 10 more minutes)
# A summary prints last. Files to commit afterwards: benchmarks/results/*, benchmarks/results/sweeps/ch0[456]_*.json
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/gpu_checks_ch04_06}
STEPS=${STEPS:-tests bench grade sweeps notebooks}
mkdir -p "$OUT"
SUMMARY=()

run_step() {
    local name=$1; shift
    echo "=== $name: $*"
    local t0=$SECONDS
    "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    local verdict="ok  "
    [ "$rc" -ne 0 ] && verdict="FAIL"
    SUMMARY+=("$verdict $name ($((SECONDS - t0)) s, exit $rc, log $OUT/$name.log)")
}

for step in $STEPS; do
    case $step in
        tests) run_step tests "$PY" -m pytest --import-mode=importlib -p no:cacheprovider -m gpu -q -rs \
                   tests/lessons/test_ch04.py tests/lessons/test_ch05.py tests/lessons/test_ch06.py ;;
        bench) run_step bench "$PY" -m benchmarks --only 04_coalescing,05_bank_conflicts,06_building_blocks ;;
        grade) run_step grade "$PY" tools/gpu_checks/ch04_06/checks.py grade ;;
        sweeps) run_step sweeps "$PY" tools/gpu_checks/ch04_06/checks.py sweeps ;;
        notebooks) run_step notebooks env EXERCISE_NOTEBOOKS="${EXERCISE_NOTEBOOKS:-0}" \
                       "$PY" tools/gpu_checks/ch04_06/checks.py notebooks ;;
        *) echo "unknown step $step (steps: tests bench grade sweeps notebooks)"; exit 2 ;;
    esac
done

echo
echo "=== summary (chapters 04-06)"
"$PY" - <<'PYEOF' 2>/dev/null || true
import json, pathlib
for f in sorted(pathlib.Path("benchmarks/results").glob("*.json")):
    d = json.loads(f.read_text())
    rows = [r for r in d.get("rows", []) if r["chapter"][:2] in ("04", "05", "06") and r.get("target") is not None]
    if rows:
        print(f"benchmark targets on {d['device']['name']}:")
        for r in rows:
            sign = ">=" if r.get("higher_is_better", True) else "<="
            ok = {True: "ok  ", False: "MISS", None: "?   "}[r.get("ok")]
            ratio = "n/a" if r.get("ratio") is None else f"{r['ratio']:.3f}"
            print(f"  {ok} {r['chapter']:18s} {r['name'][:70]:70s} ratio {ratio} (target {sign} {r['target']:.3g})")
PYEOF
grep -h "^grading:" "$OUT/grade.log" 2>/dev/null
for line in "${SUMMARY[@]}"; do echo "$line"; done
