#!/usr/bin/env bash
# The GPU track's native runs on a lent GPU machine, one group per call (each fits the device's 10-minute command
# limit on an H200; three groups at once once hung the machine, so one at a time). From the repository root:
#
#   bash benchmarks/native_gpu.sh GROUP [OUT]          OUT: where logs and JSON go (default $OUT, else /tmp/native)
#   SHARD=I/N bash benchmarks/native_gpu.sh GROUP      a pytest group's I-th of N parts (I = 1..N): every N-th test
#                                                      from the I-th, in collection order, so slow cases spread out;
#                                                      its logs are GROUP_IofN.*. The N parts together run every test
#                                                      once. DRY=1 prints the part's test ids and runs nothing.
#
#   kernels      the native kernel tests against their numpy twins          (264 passed, 500 s on 2026-12-02)
#                (283 since the chained form: both SHARDs at once, 172 s on an H100 on 2026-12-06)
#   kernels_a100 the same, forced to the A100's config set and dtype policy (HYBRID_LAB_GPU_TARGET=A100: sm_80
#                configs, no FP8; 161 of 264 in 370 s on an H100, so SHARD=1/2 and 2/2 there; 283 passed on an
#                H100 on 2026-12-06, both SHARDs at once right after `kernels`, 24 s on its warm Triton cache;
#                283 passed on an H200 the same night, 19 s)
#   sanitizer    the compute-sanitizer memcheck groups (9 since ssd_chained)   (8 passed, 283 s on 2026-12-02)
#   notebooks    every notebook under the Triton backend, strict nbval, one notebook per process (wheels: .whl-nb/)
#   retrain      every trained family's ensemble retrained and compared (tests/test_gpu_training_repro.py: MQAR
#                and retrieval9, about 8 minutes each on an H200, SHARD=1/3 and 2/3, one call each; the 4-layer
#                retrieval experiment, stored from an H100, SHARD=3/3 on an H100, about 3 minutes). A part whose
#                checkpoints came from another GPU model skips; HYBRID_LAB_REPRO_OTHER_GPU=1 runs it anyway (an
#                observation: the H200 parts were bit-identical on an H100 on 2026-12-06)
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

tag=$group                 # the name of this call's logs: the group, or GROUP_IofN for a part
tests() {                  # the tests of this call: the files, or the node ids of the SHARD's part
  if [ -z "${SHARD:-}" ]; then printf '%s\n' "$@"; return; fi
  local i=${SHARD%/*} n=${SHARD#*/}
  "${PYTEST[@]}" --collect-only -m gpu "$@" | grep '::' | awk -v i="$i" -v n="$n" 'NR >= i && (NR - i) % n == 0'
}
if [ -n "${SHARD:-}" ]; then
  [[ $SHARD =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] && (( BASH_REMATCH[1] <= BASH_REMATCH[2] )) \
    || { echo "SHARD must be I/N with 1 <= I <= N, got '$SHARD'"; exit 2; }
  case $group in
    kernels|kernels_a100|sanitizer|retrain) ;;
    *) echo "SHARD splits the pytest groups only, not $group"; exit 2 ;;
  esac
  tag=${group}_${SHARD%/*}of${SHARD#*/}
fi
run_tests() {              # pytest on this call's part of the given files, logs under $out/$tag.*
  local ids
  mapfile -t ids < <(tests "$@")
  if [ -n "${DRY:-}" ]; then printf '%s\n' "${ids[@]}"; exit 0; fi
  (( ${#ids[@]} )) || { echo "no tests selected" > "$out/$tag.log"; return 5; }
  "${PYTEST[@]}" -m gpu "${ids[@]}" --junitxml="$out/$tag.xml" > "$out/$tag.log" 2>&1
}

t0=$SECONDS
case $group in
  kernels)
    run_tests tests/test_gpu_kernels.py ;;
  kernels_a100)
    export HYBRID_LAB_GPU_TARGET=A100
    run_tests tests/test_gpu_kernels.py tests/test_gpu_dtype_policy.py ;;
  sanitizer)
    run_tests tests/test_gpu_sanitizer.py ;;
  notebooks)
    wheels .whl-nb
    rc=0
    for nb in solutions/[0-9]*.ipynb; do
      HYBRID_LAB_BACKEND=triton "${PYTEST[@]}" --nbval --nbval-sanitize-with nbval_sanitize.cfg --nbval-current-env \
        "$nb" >> "$out/notebooks.log" 2>&1 || rc=1
      echo "$nb: $(tail -n 1 "$out/notebooks.log")" >> "$out/notebooks_each.txt"   # (notebooks_summary.txt: the group's line)
    done
    (exit $rc) ;;
  retrain)
    run_tests tests/test_gpu_training_repro.py ;;
  bench)
    wheels .whl
    MAX_JOBS=16 python3 -m gpu_track.bench --only "${SECTIONS:-ssd_chunked,selective_scan}" \
      --out "$out/bench.json" > "$out/bench.log" 2>&1 ;;
  *)
    echo "unknown group $group"; exit 2 ;;
esac
rc=$?
echo "$tag: rc $rc in $((SECONDS - t0)) s; $(tail -n 1 "$out/$tag.log" 2> /dev/null)" | tee "$out/${tag}_summary.txt"
exit $rc
