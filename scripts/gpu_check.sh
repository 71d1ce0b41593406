#!/usr/bin/env bash
# The GPU check, sized for one 15-minute device lease (about 8 minutes of work).
#
# Here, once:   bash scripts/fetch_gpu_wheels.sh      (wheels the GPU image lacks, into .whl/)
# Then, one device call from the repository root, carrying .whl:
#               bash scripts/gpu_check.sh
# It installs the carried wheels if the machine lacks them, runs the `gpu` tests (CPU/GPU
# parity of the attention core in fp32 and bf16), trains each app for a few hundred steps
# in bf16 checking the loss falls, and prints both benchmarks' throughput at full size.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
status=0
step() { echo; echo "==> $*  [$(date +%T)]"; }

if ! $PY -c "import jsonargparse, jiwer, soundfile, espeakng_loader" 2>/dev/null; then
  step "installing carried wheels"
  [ -d .whl ] || { echo "missing packages and no .whl/ folder: run scripts/fetch_gpu_wheels.sh here first"; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"

step "attention core: CPU/GPU parity (fp32, bf16)"
$PY -m pytest -q -m gpu tests/test_gpu_parity.py -p no:cacheprovider || status=1

GPU_TRAIN=(--trainer.accelerator gpu --trainer.devices 1 --trainer.precision bf16-mixed --trainer.max_steps 300
           --trainer.val_check_interval 1.0 --trainer.check_val_every_n_epoch 1000 --trainer.enable_progress_bar false)

step "captioner: 300 steps of soft attention on shapes, bf16"
$PY -m show_attend.cli prepare shapes --out /tmp/gpu_shapes --train 3000 --val 100 --test 100 >/dev/null || status=1
start=$(date +%s)
$PY -m show_attend.cli fit --config configs/show_attend/shapes_soft.yaml --data.data_dir /tmp/gpu_shapes \
  --trainer.default_root_dir "$OUT/captioner" "${GPU_TRAIN[@]}" > "$OUT/captioner.log" 2>&1 || { tail -20 "$OUT/captioner.log"; status=1; }
echo "captioner: 300 steps in $(( $(date +%s) - start )) s (including start-up)"
$PY scripts/loss_fell.py "$OUT/captioner" || status=1

step "recognizer: 300 steps of LAS on synthesised speech, bf16"
$PY -m speech_attend.cli prepare synth --out /tmp/gpu_synth --train 2000 --dev 50 --test 50 >/dev/null || status=1
start=$(date +%s)
$PY -m speech_attend.cli fit --config configs/speech_attend/synth_las.yaml --data.data_dir /tmp/gpu_synth \
  --trainer.default_root_dir "$OUT/recognizer" "${GPU_TRAIN[@]}" > "$OUT/recognizer.log" 2>&1 || { tail -20 "$OUT/recognizer.log"; status=1; }
echo "recognizer: 300 steps in $(( $(date +%s) - start )) s (including start-up)"
$PY scripts/loss_fell.py "$OUT/recognizer" || status=1

step "benchmarks at full size on the GPU"
$PY scripts/bench_captioner.py --device cuda --json | tee "$OUT/bench_captioner.txt" || status=1
$PY scripts/bench_asr.py --device cuda --json | tee "$OUT/bench_asr.txt" || status=1

step "done: $([ $status -eq 0 ] && echo all checks passed || echo SOME CHECKS FAILED)"
exit $status
