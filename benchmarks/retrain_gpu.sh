#!/usr/bin/env bash
# Retrain the stored MQAR and retrieval9 ensembles on one GPU: every model its own process
# (`python -m hybrid_lab.trained.train EXP --models M --out OUT/EXP_M`), all at once, under CUDA MPS when the
# daemon starts (the processes' small kernels then share the SMs instead of taking turns; MPS changes no result:
# each process runs the same kernels on the same inputs). A model is kept only if its process finished.
#
#   bash benchmarks/retrain_gpu.sh OUT [DEADLINE_S] [EXTRA TRAIN ARGS...]     e.g. EXTRA = --steps 150 (a probe)
#
# Then: python3 benchmarks/compare_checkpoints.py OUT/EXP_M EXP (one per model: weights and recorded numbers
# against the stored ones). Measured on one H200: 11 at once need more than its 140 GB; 5 at once under MPS
# (hysparse_9, hybrid_swa_9, dense_mha, mamba2_N32, mamba2_N64) finished 4 in 495-536 s, hysparse_9 not in 545 s.
#
# The ablation experiment: its five 20-member ensembles, with --keep-weights (each process ends when its seeds are
# written: the pruning and its probes are CPU work for afterwards). Measured 2026-12-05: on one H200 three at once
# finished training in 433-439 s (without --keep-weights their probe step had not ended at a 450 s deadline and
# all three were lost); on one H100 (80 GB; each ensemble needs ~26.6 GB) two at once trained in 386-435 s, one
# alone in 377 s, and a third beside two ran out of memory. All five are stored, trained on one H100:
#   RETRAIN_ONLY="ablation9:hysparse2_9 ablation9:hysparse2_9_block" bash benchmarks/retrain_gpu.sh "$OUT/a" 500 \
#     --keep-weights        (then hysparse2_9_nowindow with hysparse2_9_gatedswa, then hysparse2_9_nobridge)
# Tar each model's folder on its own (20 seeds' weights are ~10 MB; a returned file may hold 16 MiB), copy
# OUT/ablation9_M/ablation9/M into hybrid_lab/trained/checkpoints/ablation9/, then, on any machine:
#   hybrid-lab train ablation9 --models M ... --finish     (prunes as store.KEEP_WEIGHTS says, probes, results.json)
# A process still running at the deadline is stopped and its folder kept as OUT/EXP_M.unfinished (the seeds it
# wrote may still be finished there); a failed one's as OUT/EXP_M.failed. Neither is compared or stored.
set -u
out=${1:?usage: retrain_gpu.sh OUT [DEADLINE_S] [EXTRA TRAIN ARGS...]}
deadline=${2:-540}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
jobs=(retrieval9:hysparse_9 retrieval9:hybrid_swa_9 retrieval9:hysparse2_9 retrieval9:dense_9
      mqar:mamba2 mqar:mamba2_hybrid mqar:dense_local mqar:dense mqar:mamba2_N64 mqar:mamba2_N32 mqar:dense_mha)
[ -n "${RETRAIN_ONLY:-}" ] && read -r -a jobs <<< "$RETRAIN_ONLY"

mps=0
if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
  mps=2                    # the caller started the MPS daemon (to share it with other work): use it, leave it running
elif command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d && python3 -c "import torch; torch.ones(1, device='cuda').sum().item()"; then
    mps=1
  else
    echo quit | nvidia-cuda-mps-control 2> /dev/null
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
fi
echo "MPS: $mps; ${#jobs[@]} trainings at once; deadline ${deadline} s"
t0=$SECONDS
declare -A pid
for j in "${jobs[@]}"; do
  exp=${j%%:*}; m=${j#*:}
  python3 -m hybrid_lab.trained.train "$exp" --models "$m" --out "$out/${exp}_$m" "$@" \
    > "$out/logs/${exp}_$m.log" 2>&1 &
  pid[$j]=$!
done
while (( SECONDS - t0 < deadline )); do
  running=0
  for j in "${jobs[@]}"; do kill -0 "${pid[$j]}" 2> /dev/null && running=$((running + 1)); done
  (( running == 0 )) && break
  sleep 5
done
for j in "${jobs[@]}"; do
  exp=${j%%:*}; m=${j#*:}
  if kill -0 "${pid[$j]}" 2> /dev/null; then
    kill "${pid[$j]}"; sleep 1; mv "$out/${exp}_$m" "$out/${exp}_$m.unfinished" 2> /dev/null
    echo "$j: stopped at the deadline (what it wrote: $out/${exp}_$m.unfinished)"
  elif wait "${pid[$j]}"; then
    echo "$j: $(tail -n 1 "$out/logs/${exp}_$m.log")"
  else
    mv "$out/${exp}_$m" "$out/${exp}_$m.failed" 2> /dev/null; echo "$j: FAILED"; tail -n 5 "$out/logs/${exp}_$m.log"
  fi
done
echo "all done in $((SECONDS - t0)) s (MPS: $mps)"
(( mps == 1 )) && echo quit | nvidia-cuda-mps-control
exit 0
