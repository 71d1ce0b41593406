#!/usr/bin/env bash
# The GPU check: at most 8 minutes on a CUDA machine that has torch, lightning and numpy, perhaps
# not this project's other packages (docs/BENCHMARKS.md, "GPU").
#
# Without network there: bash scripts/gpu/fetch_wheels.sh on a machine with it (the other packages'
# wheels, into .whl/), copy .whl/ along with the working tree, then on the CUDA machine:
#   bash scripts/gpu/check.sh        (installs the wheels of .whl/ when the packages are missing)
# Rehearsal on a CPU (toy sizes, every stage and file):
#   OUT=outputs/gpu_check_rehearsal PYTHON=.venv/bin/python GPU_CHECK_DEVICE=cpu GPU_CHECK_TINY=1 \
#     OMP_NUM_THREADS=1 nice -n 15 bash scripts/gpu/check.sh        (GPU_CHECK_SCALE=N: every limit N times longer)
#
# Stages, the most valuable evidence first; each has its own time limit, and all of them share
# GPU_CHECK_BUDGET seconds (default 450): a stage that no longer fits is skipped, and said so.
#   parity           the `gpu` tests: CPU/GPU parity of the attention core in fp32 and bf16
#   captioner        300 steps of soft attention on shapes, bf16-mixed: the loss falls by half, no NaN
#   recognizer       300 steps of LAS on synthesised speech, bf16-mixed: the same checks
#   bench_captioner  python -m scripts.benchmarks.captioner --device cuda --json (paper size), against the CPU's figures
#   bench_asr        python -m scripts.benchmarks.recognizer --device cuda --json, the same
# Both apps' data are made on the CPU cores while the parity tests run.
#
# Under $OUT (8 files), each written as soon as it exists:
#   gpu_check.log    this script's own lines: stages, times, results
#   summary.json     environment, each stage's outcome and time, the checks and the GPU/CPU ratios
#   parity.txt  captioner.log  recognizer.log  bench_captioner.txt  bench_asr.txt   each stage's output
#   loss_curves.csv  app,step,loss of both trainings
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-outputs/gpu_check}
DEVICE=${GPU_CHECK_DEVICE:-cuda}       # cpu: a rehearsal of the same flow
TINY=${GPU_CHECK_TINY:-0}              # 1: toy sizes (with DEVICE=cpu)
BUDGET=${GPU_CHECK_BUDGET:-450}        # seconds for all stages
SCALE=${GPU_CHECK_SCALE:-1}            # every time limit times this (a rehearsal on a busy CPU)
WORK=${GPU_CHECK_WORK:-/tmp/gpu_check} # data and runs (large; not under $OUT)
SITE=${GPU_CHECK_SITE:-/tmp/site}      # where the wheels of .whl/ are installed
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/gpu_check.log" SUMMARY="$OUT/summary.json" CURVES="$OUT/loss_curves.csv"
rm -f "$LOG" "$SUMMARY" "$CURVES"
status=0

say() { echo "$*" | tee -a "$LOG"; }
report() { $PY -m scripts.gpu.report "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

# run_stage NAME CAP OUTPUT CMD...: CMD under min(CAP, what is left of the budget), its output to
# OUTPUT, its outcome to summary.json. Returns CMD's status (124: stopped at its limit; 3: skipped).
run_stage() {
  local name=$1 cap=$(( $2 * SCALE )) output=$3 left limit start rc took
  shift 3
  left=$(( BUDGET * SCALE - SECONDS ))
  limit=$(( cap < left ? cap : left ))
  if (( limit < 20 )); then
    say "==> $name: skipped, ${left} s of the $(( BUDGET * SCALE )) s budget left"
    echo "skipped: ${left} s of the budget left" > "$output"
    report stage --summary "$SUMMARY" "$name" --rc 3 --seconds 0 --limit 0 --note "budget spent" >/dev/null
    status=1
    return 3
  fi
  say "==> $name (limit ${limit} s)  [$(date +%T), ${SECONDS} s in]"
  start=$SECONDS
  timeout -k 10 "$limit" "$@" > "$output" 2>&1
  rc=$?
  took=$(( SECONDS - start ))
  report stage --summary "$SUMMARY" "$name" --rc $rc --seconds $took --limit "$limit" >/dev/null
  say "    $name: exit $rc after $took s$( ((rc == 124 || rc == 137)) && echo ' (stopped at its time limit)')"
  (( rc == 0 )) || { tail -5 "$output" | sed 's/^/    | /' | tee -a "$LOG"; status=1; }
  return $rc
}

say "gpu_check on $(uname -n) at $(date -u +%FT%TZ): device $DEVICE, tiny $TINY, budget $(( BUDGET * SCALE )) s, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! $PY -c "import jsonargparse, jiwer, soundfile, espeakng_loader" 2>/dev/null; then
  [ -d .whl ] || { say "missing packages and no .whl/ folder: run scripts/gpu/fetch_wheels.sh here first"; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl 2>&1 | tee -a "$LOG"
  export PYTHONPATH="$PYTHONPATH:$SITE"
  say "installed the carried wheels into $SITE ($(ls .whl | wc -l) wheels) in ${SECONDS} s"
fi
report env --summary "$SUMMARY" || { say "the environment could not be read: stopping"; exit 2; }

if [ "$TINY" = 1 ]; then
  SHAPES=(--train 200 --val 10 --test 10) SYNTH=(--train 200 --dev 10 --test 10)
  STEPS=40 MIN_DROP=${GPU_CHECK_MIN_DROP:-0.2} CAPTION_DATA=(--data.batch_size 16) SPEECH_DATA=(--data.batch_size 4)
else
  SHAPES=(--train 2000 --val 50 --test 50) SYNTH=(--train 2000 --dev 50 --test 50)
  STEPS=300 MIN_DROP=${GPU_CHECK_MIN_DROP:-0.5} CAPTION_DATA=(--data.num_workers 4) SPEECH_DATA=(--data.num_workers 4)
fi
ACCELERATOR=$([ "$DEVICE" = cuda ] && echo gpu || echo cpu)
TRAIN=(--trainer.accelerator "$ACCELERATOR" --trainer.devices 1 --trainer.precision bf16-mixed --trainer.max_steps "$STEPS"
       --trainer.log_every_n_steps 5 --trainer.val_check_interval 1.0 --trainer.check_val_every_n_epoch 1000
       --trainer.enable_progress_bar false)

# Both apps' data, on the CPU cores (each under its own limit), while the GPU runs the parity tests.
rm -rf "$WORK/shapes" "$WORK/synth" "$WORK/captioner" "$WORK/recognizer"
timeout -k 5 $(( 150 * SCALE )) $PY -m show_attend.cli prepare shapes --out "$WORK/shapes" "${SHAPES[@]}" --quiet > "$WORK/shapes.log" 2>&1 &
shapes_job=$!
timeout -k 5 $(( 150 * SCALE )) $PY -m speech_attend.cli prepare synth --out "$WORK/synth" "${SYNTH[@]}" > "$WORK/synth.log" 2>&1 &
synth_job=$!
trap 'kill $shapes_job $synth_job 2>/dev/null' EXIT

# data_ready NAME JOB LOG: wait for a data job; when it failed, say why and record the stage as failed.
data_ready() {
  local start=$SECONDS rc
  wait "$2"
  rc=$?
  (( rc == 0 )) && { say "    $1 data ready (waited $(( SECONDS - start )) s)"; return 0; }
  say "==> $1: its data could not be made (exit $rc):"
  tail -5 "$3" | sed 's/^/    | /' | tee -a "$LOG"
  cp "$3" "$OUT/$1.log"
  report stage --summary "$SUMMARY" "$1" --rc "$rc" --seconds 0 --limit $(( 150 * SCALE )) --note "data preparation failed" >/dev/null
  status=1
  return 1
}

if [ "$DEVICE" = cuda ]; then
  run_stage parity 120 "$OUT/parity.txt" $PY -m pytest -q -p no:cacheprovider -m gpu tests/shared/test_gpu_parity.py
else  # no CUDA here: the tests would fail by design; collecting them checks their imports
  run_stage parity 120 "$OUT/parity.txt" $PY -m pytest -q -p no:cacheprovider -m gpu --collect-only tests/shared/test_gpu_parity.py
fi
say "    $(grep -E 'passed|failed|error|collected|tests? ' "$OUT/parity.txt" | tail -1)"

if data_ready captioner $shapes_job "$WORK/shapes.log"; then
  run_stage captioner 150 "$OUT/captioner.log" $PY -m show_attend.cli fit --config configs/show_attend/shapes_soft.yaml \
    --data.data_dir "$WORK/shapes" --trainer.default_root_dir "$WORK/captioner" "${TRAIN[@]}" "${CAPTION_DATA[@]}"
  report loss --summary "$SUMMARY" --run "$WORK/captioner" --app captioner --csv "$CURVES" --steps "$STEPS" --min-drop "$MIN_DROP" || status=1
fi

if data_ready recognizer $synth_job "$WORK/synth.log"; then
  run_stage recognizer 150 "$OUT/recognizer.log" $PY -m speech_attend.cli fit --config configs/speech_attend/synth_las.yaml \
    --data.data_dir "$WORK/synth" --trainer.default_root_dir "$WORK/recognizer" "${TRAIN[@]}" "${SPEECH_DATA[@]}"
  report loss --summary "$SUMMARY" --run "$WORK/recognizer" --app recognizer --csv "$CURVES" --steps "$STEPS" --min-drop "$MIN_DROP" || status=1
fi

for app in captioner asr; do
  name=$([ $app = asr ] && echo recognizer || echo captioner)
  if [ "$TINY" = 1 ]; then
    run_stage "bench_$app" 120 "$OUT/bench_$app.txt" $PY -m scripts.gpu.report tinybench --app "$name" --device "$DEVICE"
  else
    run_stage "bench_$app" "$([ $app = asr ] && echo 180 || echo 120)" "$OUT/bench_$app.txt" \
      $PY -m "scripts.benchmarks.$name" --device "$DEVICE" --json
  fi
  report bench --summary "$SUMMARY" --app "$name" --output "$OUT/bench_$app.txt" || status=1
done

say "==> done in ${SECONDS} s: $([ $status -eq 0 ] && echo 'all checks passed' || echo 'SOME CHECKS FAILED or were skipped (summary.json)')"
exit $status
