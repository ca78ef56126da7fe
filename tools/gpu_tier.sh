#!/usr/bin/env bash
# The GPU tier and the benchmark suite on a machine with a GPU, with or without network.
#
#   tools/gpu_tier.sh [pytest paths and options...]      (default: tests)
#
# WHEELS=DIR   wheels to install first with --no-index (an offline wheelhouse; default .whl if present)
# BENCH=LIST   chapters for `python -m benchmarks --only` ("all", the default, or "none")
# OUT=DIR      where logs and a tarball of benchmarks/results go (default /tmp/gpu-tier)
# Sweeps are recorded (COURSE_RECORD_SWEEPS=1) so CPU-only machines can replay them.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-/tmp/gpu-tier}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COURSE_RECORD_SWEEPS=${COURSE_RECORD_SWEEPS:-1}
WHEELS=${WHEELS:-.whl}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/course-site "$WHEELS"/*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 2; }
  export PYTHONPATH=/tmp/course-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/course-site/bin:$PATH
  export JUPYTER_PATH=/tmp/course-site/share/jupyter
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
python3 -m pytest -m gpu -p no:cacheprovider --import-mode=importlib -q -rfEs "${@:-tests}" 2>&1 \
  | tee "$OUT/gpu_tests.log" || status=1
if [ "${BENCH:-all}" != none ]; then
  only=()
  [ "${BENCH:-all}" != all ] && only=(--only "$BENCH")
  python3 -m benchmarks "${only[@]}" 2>&1 | tee "$OUT/benchmarks.log" || status=1
fi
tar czf "$OUT/results.tgz" benchmarks/results
exit $status
