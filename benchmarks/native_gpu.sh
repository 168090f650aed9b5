#!/usr/bin/env bash
# The GPU track's native runs on a lent GPU machine, one group per call (each fits the device's 10-minute command
# limit on an H200; three groups at once once hung the machine, so one at a time). From the repository root:
#
#   bash benchmarks/native_gpu.sh GROUP [OUT]          OUT: where logs and JSON go (default $OUT, else /tmp/native)
#
#   kernels      the native kernel tests against their numpy twins          (264 passed, 500 s on 2026-12-02)
#   kernels_a100 the same, forced to the A100's config set and dtype policy (HYBRID_LAB_GPU_TARGET=A100: sm_80
#                configs, no FP8)
#   sanitizer    the compute-sanitizer memcheck groups                       (8 passed, 283 s on 2026-12-02)
#   notebooks    every notebook under the Triton backend, strict nbval, one notebook per process (wheels: .whl-nb/)
#   retrain      one seed of every trained family retrained and compared (tests/test_gpu_training_repro.py)
#   bench        gpu_track.bench for the comma-separated sections in SECTIONS (default ssd_chunked,selective_scan), with
#                fla-core from .whl/ and mamba-ssm's source under .devrun/peers/; merge the JSON afterwards with
#                benchmarks/merge_bench.py
#
# What a call must carry (ignored by git, prepared on a CPU machine): notebooks: .whl-nb (nbval, ipykernel and their
# dependencies); bench: .whl (fla-core) and .devrun/peers (the mamba-ssm sdist, extracted). The other groups: nothing.
# pytest reads no project config on the machine (-c /dev/null): the repository's addopts name plugins it lacks.
set -u
group=${1:?usage: native_gpu.sh GROUP [OUT] (kernels, kernels_a100, sanitizer, notebooks, retrain, bench)}
out=${2:-${OUT:-/tmp/native}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PYTEST=(python3 -m pytest -q -p no:randomly -c /dev/null --rootdir="$PWD")

wheels() {   # the wheels a group needs, into /tmp/site (nothing is installed into the machine's Python)
  local dir=$1
  ls "$dir"/*.whl > /dev/null 2>&1 || { echo "no wheels in $dir (carry it)"; exit 2; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$dir"/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
}

t0=$SECONDS
case $group in
  kernels)
    "${PYTEST[@]}" -m gpu tests/test_gpu_kernels.py --junitxml="$out/kernels.xml" > "$out/kernels.log" 2>&1 ;;
  kernels_a100)
    HYBRID_LAB_GPU_TARGET=A100 "${PYTEST[@]}" -m gpu tests/test_gpu_kernels.py tests/test_gpu_dtype_policy.py \
      --junitxml="$out/kernels_a100.xml" > "$out/kernels_a100.log" 2>&1 ;;
  sanitizer)
    "${PYTEST[@]}" -m gpu tests/test_gpu_sanitizer.py --junitxml="$out/sanitizer.xml" > "$out/sanitizer.log" 2>&1 ;;
  notebooks)
    wheels .whl-nb
    rc=0
    for nb in solutions/[0-9]*.ipynb; do
      HYBRID_LAB_BACKEND=triton "${PYTEST[@]}" --nbval --nbval-sanitize-with nbval_sanitize.cfg --nbval-current-env \
        "$nb" >> "$out/notebooks.log" 2>&1 || rc=1
      echo "$nb: $(tail -n 1 "$out/notebooks.log")" >> "$out/notebooks_summary.txt"
    done
    (exit $rc) ;;
  retrain)
    "${PYTEST[@]}" -m gpu tests/test_gpu_training_repro.py > "$out/retrain.log" 2>&1 ;;
  bench)
    wheels .whl
    MAX_JOBS=16 python3 -m gpu_track.bench --only "${SECTIONS:-ssd_chunked,selective_scan}" \
      --out "$out/bench.json" > "$out/bench.log" 2>&1 ;;
  *)
    echo "unknown group $group"; exit 2 ;;
esac
rc=$?
echo "$group: rc $rc in $((SECONDS - t0)) s; $(tail -n 1 "$out/$group.log" 2> /dev/null)" | tee "$out/${group}_summary.txt"
exit $rc
