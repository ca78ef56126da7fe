#!/bin/sh
# The browser test and the Colab simulation on an air-gapped GPU machine, from what
# tools/stage.py carried over (a wheelhouse and a portable Chromium + Node), in the repository root:
#
#   sh tools/offline_gpu_tests.sh probe     # what the machine has: GPU, glibc, ensurepip, fonts
#   sh tools/offline_gpu_tests.sh browser   # unpack /tmp/stage if needed, then tests/browser
#   sh tools/offline_gpu_tests.sh colab     # tests/test_colab.py's simulation (chapters 01 and 08)
#
# Both tests run through the README's command, `python3 tools/bootstrap.py test`, with
# COURSE_WHEELHOUSE pointing at the carried wheels, so .venv is built offline exactly as in a lab.
# STAGE (default /tmp/stage) holds the parts, OFFLINE (default /tmp/offline) gets them unpacked;
# screenshots and logs go to $OUT (or /tmp/offline-results).
set -u
STAGE=${STAGE:-/tmp/stage}
OFFLINE=${OFFLINE:-/tmp/offline}
RESULTS=${OUT:-/tmp/offline-results}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1

unpacked() {
    if [ ! -d "$OFFLINE/wheels" ]; then
        python3 tools/stage.py unpack "$STAGE" "$OFFLINE" || exit 1
    fi
    export PATH="$OFFLINE/browser/bin:$PATH" COURSE_CHROMIUM="$OFFLINE/browser/bin/chromium"
    export COURSE_WHEELHOUSE="$OFFLINE/wheels"
    # bootstrap.py makes .venv with `python3 -m venv`; a Python without ensurepip (Debian/Ubuntu
    # without python3-venv) gets one without pip, and pip from the wheelhouse.
    if ! python3 -c 'import ensurepip' 2>/dev/null && [ ! -x .venv/bin/pip ]; then
        pip_wheel=$(ls "$OFFLINE"/wheels/pip-*.whl | tail -1)
        python3 -m venv --clear --without-pip .venv &&
            .venv/bin/python "$pip_wheel/pip" install -q --no-index "$pip_wheel" || exit 1
    fi
}

case "${1:-}" in
probe)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    ldd --version | head -1
    python3 -c 'import sys; print(sys.version.split()[0], sys.executable, sys.base_prefix)'
    python3 -c 'import ensurepip; print("ensurepip: yes")' 2>&1 | tail -1
    for t in xz tar node chromium fc-list; do printf '%s: %s\n' "$t" "$(command -v $t || echo none)"; done
    ls /usr/share/fonts 2>&1 | head -3
    df -h /tmp | tail -1
    ;;
browser)
    unpacked
    rm -rf tests/browser/node_modules && cp -r "$OFFLINE/browser/node_modules" tests/browser/
    shots=/tmp/offline-screenshots
    rm -rf "$shots"
    COURSE_SCREENSHOTS=$shots timeout 540 python3 tools/bootstrap.py test -p no:cacheprovider -rA \
        tests/browser 2>&1 | tee "$RESULTS/browser.log"
    tar -cf "$RESULTS/screenshots.tar" -C "$shots" . 2>/dev/null
    ;;
colab)
    unpacked
    COURSE_COLAB_CHAPTERS=${COURSE_COLAB_CHAPTERS:-01_first_kernel,08_tensor_cores} \
        timeout 560 python3 tools/bootstrap.py test -p no:cacheprovider -rA \
        tests/test_colab.py -k simulation 2>&1 | tee "$RESULTS/colab.log"
    ;;
*)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
