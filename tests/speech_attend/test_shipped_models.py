"""The models that ship in ``models/``: small enough, loadable without pickles, and still giving
the outputs recorded when they were exported (``tests/data/shipped/expected.json``).

The clips are new sentences by speakers the shipped recognizer never heard: an eSpeak voice held
out of training, the piper voice at a held-out shift, and a person (pocketsphinx-testdata's
``cards/003.wav``, BSD-2-Clause). A change that alters what the shipped model writes for them
fails here, and the recorded outputs and the model card (``models/README.md``) must then be
renewed together.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.io.model_files import load_model_files
from speech_attend.cli import main as speech_attend
from speech_attend.evaluate.metrics import char_error_rate
from speech_attend.infer.transcribe import SHIPPED_MODEL, Transcriber
from speech_attend.model.lm import LM_FILES

ROOT = Path(__file__).resolve().parents[2]
CLIPS = ROOT / "tests" / "data" / "shipped"
EXPECTED = json.loads((CLIPS / "expected.json").read_text())
MAX_MODEL_BYTES = 25 * 1024 * 1024


def test_the_shipped_recognizer_is_a_small_attend_model_folder_with_its_language_model():
    files = sorted(p.name for p in SHIPPED_MODEL.iterdir())
    assert files == ["config.json", "lm.json", "lm.safetensors", "model.safetensors"], files
    for part, names in (("the recognizer", ("config.json", "model.safetensors")), ("its language model", LM_FILES)):
        size = sum((SHIPPED_MODEL / name).stat().st_size for name in names)
        assert size <= MAX_MODEL_BYTES, f"{part} in models/speech_attend is {size / 2**20:.1f} MiB, over the 25 MiB it may take"
    config = json.loads((SHIPPED_MODEL / "config.json").read_text())
    assert (config["format"], config["app"]) == ("attend/1", "speech-attend")
    assert load_model_files(SHIPPED_MODEL, "speech-attend").state_dict  # safetensors: no pickled code to run


def test_the_shipped_recognizer_still_writes_its_recorded_transcripts():
    transcriber = Transcriber.load(SHIPPED_MODEL)
    assert transcriber.lm is not None and transcriber.decoding.lm_weight > 0  # it decodes with its language model
    clips = sorted(EXPECTED["speech_attend"])
    assert len(clips) >= 2
    written = {name: transcriber.transcribe(CLIPS / name).text for name in clips}
    assert written == EXPECTED["speech_attend"]


def test_the_shipped_recognizer_writes_no_words_for_sounds_without_speech(tmp_path):
    # `evaluate --conditions non-speech`'s one-second sounds (same seed). Over the tones the shipped speller
    # spells "are an indening" while its CTC head reads one "a": the no-speech check (timing.NO_SPEECH_CTC_SHARE)
    # must keep such invented words out.
    from speech_attend.evaluate.word_times import non_speech_clips

    transcriber = Transcriber.load(SHIPPED_MODEL)
    written = {path.name: transcriber.transcribe(path).text for path in non_speech_clips(tmp_path, [1.0], seed=0)}
    assert len(written) == 5 and all(text == "" for text in written.values()), written


def test_confidences_are_the_spellers_log_probabilities_also_with_the_language_model_fused():
    # The fused beam score adds the length bonus per character, and with one goes above 0; a
    # confidence is the speller's own mean log-probability, so at most 0.
    transcriber = Transcriber.load(SHIPPED_MODEL, length_bonus=1.0)
    assert transcriber.decoding.length_bonus > 0 and transcriber.decoding.lm_weight > 0
    for name in sorted(EXPECTED["speech_attend"]):
        segment = transcriber.transcribe(CLIPS / name).segments[0]
        confidences = [segment.confidence, *(w.confidence for w in segment.words)]
        assert all(c is not None and -5.0 < c < 0.0 for c in confidences), (name, confidences)


def test_transcribe_without_ckpt_uses_the_shipped_model(capsys):
    name = sorted(EXPECTED["speech_attend"])[0]
    assert speech_attend(["transcribe", "--json", str(CLIPS / name)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["text"] == EXPECTED["speech_attend"][name]


@pytest.mark.parametrize("name", sorted(EXPECTED["references"]))
def test_the_recorded_transcripts_are_close_to_what_was_said(name):
    # Guards the recording itself: a renewal that records garbage as "expected" fails here.
    said, written = EXPECTED["references"][name], EXPECTED["speech_attend"][name]
    assert char_error_rate([said], [written]) <= 0.35, (said, written)


def test_the_model_card_describes_each_shipped_model():
    card = (ROOT / "models" / "README.md").read_text()
    for folder in sorted(p.name for p in (ROOT / "models").iterdir() if p.is_dir()):
        assert f"models/{folder}" in card, f"models/README.md says nothing of models/{folder}"
