"""Recordings as people make them: a DC offset, a microphone's gain set far too low, steady room
noise, and a file too quiet to use. The front end must hear the first two as the clean clip;
the transcriber must tell quiet speech from silence by the file's own levels."""

import math
from dataclasses import asdict

import numpy as np
import pytest
import soundfile as sf
import torch

from shared import Vocabulary
from shared.io.model_files import export_folder, load_model_files
from speech_attend.cli import main as speech_attend
from speech_attend.data.augment import AugmentConfig, augment_batch, non_speech
from speech_attend.infer.pauses import is_silent
from speech_attend.infer.transcribe import APP, Transcriber
from speech_attend.model.features import (
    ColourShrink,
    FeatureConfig,
    FeatureFrontend,
    loud_frames,
    loud_mean,
    normalise_level,
    remove_dc,
    sample_step,
    speech_level,
    subtract_utterance_mean,
)
from speech_attend.model.las import LAS, DecodeConfig, LASConfig, build_recognizer
from speech_attend.model.migrations import migrate_hyper_parameters
from speech_attend.train.module import RecognizerModule

RATE = 16000
_LAS = LASConfig(
    listener_hidden=16,
    pyramid_layers=1,
    input_stack=4,
    speller_hidden=32,
    speller_layers=1,
    embedding_dim=8,
    attention_dim=8,
    location_filters=2,
    location_kernel=5,
    dropout=0.0,
    ctc_upsample=2,
)
_CHARS = list("abcdefghijklmnopqrstuvwxyz' ")


def _saved_features(saved: dict) -> FeatureConfig:
    """The feature settings that a model saved with the feature settings ``saved`` loads with."""
    return FeatureConfig(**migrate_hyper_parameters({"features": saved})["features"])


def _speech(tiny_synth) -> np.ndarray:
    audio, rate = sf.read(sorted((tiny_synth / "test").rglob("*.flac"))[0])
    assert rate == RATE
    return audio


def _dbfs_gain(db: float) -> float:
    return 10 ** (db / 20)


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    """An untrained recognizer with this front end, exported: whatever it writes depends only on its features."""
    torch.manual_seed(0)
    vocabulary = Vocabulary(_CHARS)
    model = LAS(_LAS, FeatureConfig(freq_masks=0, time_masks=0), vocabulary)
    hparams = {
        "vocabulary": vocabulary.to_dict()["tokens"],
        "las": asdict(_LAS),
        "features": asdict(model.frontend.config),
        "decoding": asdict(DecodeConfig(beam_size=2)),
    }
    return export_folder(tmp_path_factory.mktemp("random_model"), APP, model.state_dict(), hparams)


# ----------------------------------------------------------------------------- the front end


def test_dc_offset_and_gain_leave_the_features_unchanged(tiny_synth):
    clean = torch.tensor(_speech(tiny_synth), dtype=torch.float32)[None]
    lengths = torch.tensor([clean.size(1)])
    # The clip is 16-bit and its changed copies float: without the rounding step, which takes only
    # the first's rounding noise out (tested below), their features are the same.
    frontend = FeatureFrontend(FeatureConfig(freq_masks=0, time_masks=0, rounding_noise=0.0)).eval()
    reference, _ = frontend(clean, lengths)
    for changed in (0.5 * clean + 0.4, clean + 0.3, clean - 0.3, clean * _dbfs_gain(-20), clean * _dbfs_gain(-50)):
        features, _ = frontend(changed, lengths)
        torch.testing.assert_close(features, reference, atol=0.05, rtol=0)


def test_dc_removal_and_level_use_only_each_waveforms_own_samples():
    waves = torch.zeros(2, 4000)
    waves[0] = torch.sin(torch.arange(4000) / 5.0) * 0.1 + 0.5
    waves[1, :2000] = torch.sin(torch.arange(2000) / 5.0) * 0.01 - 0.2
    lengths = torch.tensor([4000, 2000])
    centred = remove_dc(waves, lengths)
    assert abs(float(centred[0].mean())) < 1e-4 and abs(float(centred[1, :2000].mean())) < 1e-4
    assert not centred[1, 2000:].any()  # padding stays zero
    levelled = normalise_level(centred, lengths, RATE, -20.0)
    level_db = 10 * torch.log10(speech_level(levelled, lengths, RATE))
    torch.testing.assert_close(level_db, torch.tensor([-20.0, -20.0]), atol=1e-3, rtol=0)
    silent = normalise_level(torch.zeros(1, 800), torch.tensor([800]), RATE, -20.0)
    assert torch.isfinite(silent).all() and not silent.any()  # digital silence stays silence, no NaN


def test_models_saved_before_the_level_steps_keep_their_features():
    assert FeatureConfig().remove_dc and FeatureConfig().level_dbfs == -20.0  # new models have both steps
    old = _saved_features({"n_mels": 40})
    assert not old.remove_dc and old.level_dbfs is None
    hparams = {"vocabulary": _CHARS, "las": asdict(_LAS), "features": {"n_mels": 80, "freq_masks": 0, "time_masks": 0}}
    model = build_recognizer(hparams)
    assert not model.frontend.config.remove_dc and model.frontend.config.level_dbfs is None
    with pytest.raises(ValueError, match="level_dbfs"):
        FeatureConfig(level_dbfs=12.0)


def test_the_utterance_mean_takes_a_fixed_colour_out_of_the_features(tiny_synth):
    clean = torch.tensor(_speech(tiny_synth), dtype=torch.float32)[None]
    lengths = torch.tensor([clean.size(1)])
    # A channel that tilts the spectrum: y[n] = x[n] + 0.8 x[n-1] (up to +5 dB at low, -14 dB at high frequencies).
    coloured = clean.clone()
    coloured[:, 1:] += 0.8 * clean[:, :-1]

    def distance(utterance_mean: bool) -> float:
        frontend = FeatureFrontend(FeatureConfig(freq_masks=0, time_masks=0, utterance_mean=utterance_mean)).eval()
        a, b = frontend(clean, lengths)[0], frontend(coloured, lengths)[0]
        assert torch.isfinite(b).all()
        return float((a - b).abs().mean())

    assert distance(True) < 0.3 * distance(False)


def test_the_utterance_mean_is_taken_over_loud_frames_so_silence_does_not_move_it():
    generator = torch.Generator().manual_seed(0)
    speech = torch.randn(1, 50, 8, generator=generator) - 2.0  # natural-log mel powers
    silence = torch.full((1, 150, 8), -13.8)  # digital silence: 60 dB under the speech
    padded = torch.cat([torch.cat([speech, silence], 1), torch.cat([speech, torch.zeros(1, 150, 8)], 1)])  # (2, 200, 8)
    frames = torch.tensor([200, 50])
    loud = loud_frames(padded, frames, range_db=30.0)
    assert loud[0, :50].sum() >= 45 and not loud[0, 50:].any() and not loud[1, 50:].any()
    out = subtract_utterance_mean(padded, frames, loud)
    torch.testing.assert_close(out[0, :50], out[1, :50])  # three times more silence, the same speech frames
    assert not out[1, 50:].any()  # padding stays 0
    torch.testing.assert_close(out[1, :50][loud[1, :50]].mean(0), torch.zeros(8), atol=1e-5, rtol=0)
    shifted = subtract_utterance_mean(padded + torch.linspace(-3, 3, 8), frames, loud)  # a colour: a constant per band
    torch.testing.assert_close(shifted[:, :50], out[:, :50])
    empty = torch.zeros(1, 4, 8)
    assert not subtract_utterance_mean(empty, torch.tensor([0]), loud_frames(empty, torch.tensor([0]), 30.0)).any()


def test_the_utterance_mean_is_off_unless_asked_for_and_its_range_is_checked():
    assert not FeatureConfig().utterance_mean and not _saved_features({"n_mels": 80}).utterance_mean
    with pytest.raises(ValueError, match="utterance_mean_db"):
        FeatureConfig(utterance_mean=True, utterance_mean_db=0.0)


def test_the_colour_shrink_moves_a_fixed_colour_that_fraction_of_the_way_to_the_training_colour():
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2, 60, 8, generator=generator) - 2.0  # natural-log mel powers
    frames = torch.tensor([60, 40])
    colour = torch.linspace(-3, 3, 8)  # a constant per band
    for alpha in (0.25, 0.5, 1.0):
        shrink = ColourShrink(8, alpha)
        shrink.set_mean(torch.full((8,), -2.0, dtype=torch.float64) * 5, 5)  # the training colour: -2 in every band
        loud = loud_frames(features, frames, 30.0)
        plain = shrink(features, frames, loud)
        coloured = shrink(features + colour, frames, loud_frames(features + colour, frames, 30.0))
        # x - alpha (m - mu): what the colour adds is left at (1 - alpha) of itself
        torch.testing.assert_close(coloured[0] - plain[0], (1 - alpha) * colour.expand(60, 8))
        torch.testing.assert_close(loud_mean(plain, loud), loud_mean(features, loud) * (1 - alpha) + alpha * -2.0)
        assert not plain[1, 40:].any()  # padding stays 0


def test_the_colour_shrink_is_off_by_default_and_leaves_other_models_state_as_it_was():
    assert FeatureConfig().colour_shrink == 0 and _saved_features({"n_mels": 80}).colour_shrink == 0
    plain = FeatureFrontend(FeatureConfig())
    assert plain.colour is None and not any("colour" in key for key in plain.state_dict())
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="colour_shrink"):
            FeatureConfig(colour_shrink=bad)
    with pytest.raises(ValueError, match="set one of them"):
        FeatureConfig(colour_shrink=0.5, utterance_mean=True)


def test_a_model_that_shrinks_colours_started_from_weights_without_gets_its_training_colour_and_keeps_its_norm(tmp_path):
    def module(**features):
        return RecognizerModule(las=_LAS, features=FeatureConfig(freq_masks=0, time_masks=0, **features), vocabulary=_CHARS)

    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randn(3, RATE, generator=generator) * 0.1, torch.tensor([RATE, 12000, 9000]))]
    trained = module()
    trained.set_feature_statistics(batches)
    export_folder(tmp_path / "export", APP, trained.model.state_dict(), dict(trained.hparams))
    shrinking = module(colour_shrink=0.5)
    shrinking.load_model_weights(load_model_files(tmp_path / "export", APP), "test")
    frontend = shrinking.model.frontend
    assert frontend.norm.initialised and not frontend.colour.initialised and frontend.needs_statistics
    norm_before = frontend.norm.mean.clone()
    shrinking.set_feature_statistics(batches)  # fit's start: the colour only
    assert not frontend.needs_statistics and int(frontend.colour.utterances) == 3
    torch.testing.assert_close(frontend.norm.mean, norm_before)
    raw, frames = frontend._logmel(*batches[0])
    torch.testing.assert_close(frontend.colour.mean, loud_mean(raw, loud_frames(raw, frames, 30.0)).mean(0))


def _rounded_to_16_bits(wave: torch.Tensor) -> torch.Tensor:
    return torch.round(wave * 32767) / 32767


def test_the_expected_power_of_white_noise_is_what_white_noise_measures():
    # the rounding step subtracts this share of a quiet file's power
    logmel = FeatureFrontend(FeatureConfig(level_dbfs=None, remove_dc=False)).logmel
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(4, 64000, generator=generator) * 10 ** (-30.0 / 20)
    power = logmel.mel(noise).mean(dim=(0, 2))  # (n_mels,) measured
    torch.testing.assert_close(power, logmel.white_noise_power(1e-3), rtol=0.1, atol=0)


def test_the_mel_power_is_torchaudios_mel_spectrogram_computed_as_re2_plus_im2():
    logmel = FeatureFrontend(FeatureConfig()).logmel
    generator = torch.Generator().manual_seed(0)
    for samples in (400, 401, 16000):  # one frame, one frame and a sample, many frames
        waveforms = torch.randn(3, samples, generator=generator) * 0.1
        torch.testing.assert_close(logmel.mel_power(waveforms), logmel.mel(waveforms), rtol=1e-5, atol=1e-9)


def test_a_model_saved_with_the_noise_floor_off_loads_and_one_with_it_on_is_refused():
    assert _saved_features({"n_mels": 80, "noise_floor_dbfs": None}).n_mels == 80
    with pytest.raises(ValueError, match="noise_floor_dbfs"):
        _saved_features({"n_mels": 80, "noise_floor_dbfs": -50.0})


def test_the_rounding_step_is_read_off_the_samples_of_8_to_16_bit_audio():
    generator = torch.Generator().manual_seed(0)
    waves = torch.rand(5, 4000, generator=generator) * 1.6 - 0.8
    for row, bits in ((1, 16), (2, 12), (3, 8)):
        waves[row] = torch.round(waves[row] * 2 ** (bits - 1)) / 2 ** (bits - 1)
    waves[4] = torch.round(waves[4] * 2**15) / 2**15
    waves[4, 3000:] = 0.123456  # past its length: padding, not its samples
    steps = sample_step(waves, torch.tensor([4000, 4000, 4000, 4000, 3000]))
    torch.testing.assert_close(steps, torch.tensor([0.0, 2.0**-15, 2.0**-11, 2.0**-7, 2.0**-15]), rtol=0, atol=0)


def _as_16_bit_file(wave: np.ndarray, tmp_path, name: str) -> torch.Tensor:
    """``wave`` written as a 16-bit WAV and read back, as a sound card stores it: `(1, N)`."""
    sf.write(tmp_path / f"{name}.wav", np.clip(wave, -1, 1), RATE, subtype="PCM_16")
    return torch.tensor(sf.read(tmp_path / f"{name}.wav", dtype="float32")[0])[None]


def test_subtracting_the_rounding_noise_brings_a_quiet_16_bit_file_closer_to_the_clean_one(tiny_synth, tmp_path):
    speech = _speech(tiny_synth)
    clean = _as_16_bit_file(speech, tmp_path, "clean")
    quiet = _as_16_bit_file(speech * _dbfs_gain(-50), tmp_path, "quiet")  # a microphone's gain 50 dB too low
    lengths = torch.tensor([clean.size(1)])

    def distance(rounding_noise):
        frontend = FeatureFrontend(FeatureConfig(rounding_noise=rounding_noise))
        return float((frontend._logmel(clean, lengths)[0] - frontend._logmel(quiet, lengths)[0]).abs().mean())

    assert distance(1.5) < 0.85 * distance(0.0)


def test_subtracting_the_rounding_noise_leaves_files_at_a_good_level_and_off_grid_audio_as_they_were(tiny_synth, tmp_path):
    speech = _speech(tiny_synth)
    on_grid = _as_16_bit_file(speech, tmp_path, "clean")
    off_grid = torch.tensor(speech * _dbfs_gain(-50), dtype=torch.float32)[None]  # float audio: no grid, no rounding noise
    lengths = torch.tensor([on_grid.size(1)])
    with_it, without = FeatureFrontend(FeatureConfig()), FeatureFrontend(FeatureConfig(rounding_noise=0.0))
    assert with_it.config.rounding_noise > 0  # on by default, also for models saved before it (only quiet files change)
    assert _saved_features({"n_mels": 80}).rounding_noise == with_it.config.rounding_noise
    change = (with_it._logmel(on_grid, lengths)[0] - without._logmel(on_grid, lengths)[0]).abs()
    assert float(change.max()) < 0.1 and float(change.mean()) < 0.005  # log power: at most 0.4 dB in a band
    assert torch.equal(with_it._logmel(off_grid, lengths)[0], without._logmel(off_grid, lengths)[0])
    for bad in ({"rounding_noise": -1.0}, {"rounding_floor": 0.0}, {"rounding_floor": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            FeatureConfig(**bad)


def test_training_conditions_draw_offsets_and_gains_down_to_minus_50_db():
    config = AugmentConfig()
    assert config.gain_db[0] == -50.0 and config.dc_offset == (-0.3, 0.3) and config.dc_prob > 0
    only_dc = AugmentConfig(
        speed_prob=0, silence_prob=0, reverb_prob=0, noise_prob=0, telephone_prob=0, low_rate_prob=0, gain_prob=0, dc_prob=1
    )
    wave = torch.sin(torch.arange(8000) / 7.0)[None] * 0.1
    generator = torch.Generator().manual_seed(0)
    offsets = [float(augment_batch(wave, torch.tensor([8000]), only_dc, RATE, generator)[0].mean()) for _ in range(20)]
    assert all(-0.3 <= o <= 0.3 for o in offsets) and max(offsets) - min(offsets) > 0.2
    with pytest.raises(ValueError, match="dc_offset"):
        AugmentConfig(dc_offset=(-1.5, 0.3))


# ----------------------------------------------------------------------------- the transcriber


def test_quiet_speech_is_not_silence_but_steady_quiet_noise_is(tiny_synth):
    speech = torch.tensor(_speech(tiny_synth), dtype=torch.float32)
    assert not is_silent(speech * _dbfs_gain(-50), RATE)
    assert not is_silent(speech * _dbfs_gain(-70), RATE)
    room = torch.randn(3 * RATE, generator=torch.Generator().manual_seed(0)) * _dbfs_gain(-65)
    assert is_silent(room, RATE)  # steady: no rise and fall of speech
    assert is_silent(room, RATE, reference_dbfs=-10.0)  # and far under the file's speech
    assert is_silent(torch.zeros(RATE), RATE)
    assert is_silent(speech * 1e-7, RATE)  # under -100 dBFS: nothing there


def test_quiet_hum_and_tones_are_silence_but_a_quiet_phrase_without_a_pause_is_not():
    generator = torch.Generator().manual_seed(0)
    for kind in ("hum", "tones", "floor"):
        assert is_silent(non_speech(2 * RATE, kind, -60.0, RATE, generator), RATE), kind
    # A phrase without a pause: its 10 ms frame power rises and falls by about 8 dB (syllables at
    # 4 a second), less than speech with pauses, more than any steady sound.
    t = torch.arange(RATE) / RATE
    envelope = 0.7 + 0.3 * torch.sin(2 * math.pi * 4 * t)  # (N,) amplitude 0.4-1.0
    phrase = torch.randn(RATE, generator=generator) * envelope * _dbfs_gain(-60)
    assert not is_silent(phrase, RATE)


def test_offset_and_quiet_recordings_give_the_clean_transcript(random_model, tiny_synth, tmp_path):
    speech = _speech(tiny_synth)
    variants = {
        "clean": speech,
        "offset": 0.5 * speech + 0.4,
        "minus_20_db": speech * _dbfs_gain(-20),
        "minus_50_db": speech * _dbfs_gain(-50),
    }
    paths = []
    for name, audio in variants.items():
        paths.append(tmp_path / f"{name}.wav")
        sf.write(paths[-1], audio.astype(np.float32), RATE, subtype="FLOAT")
    transcriber = Transcriber.load(random_model)
    texts = {path.stem: result.text for path, result in zip(paths, transcriber.transcribe_many(paths))}
    assert texts["clean"] and set(texts.values()) == {texts["clean"]}, texts


def test_a_file_too_quiet_to_use_is_named_in_a_warning(random_model, tiny_synth, tmp_path, capsys):
    quiet = tmp_path / "quiet.wav"
    sf.write(quiet, (_speech(tiny_synth) * _dbfs_gain(-75)).astype(np.float32), RATE, subtype="FLOAT")
    room = tmp_path / "room.wav"
    sf.write(room, np.random.default_rng(0).normal(0, _dbfs_gain(-65), 2 * RATE).astype(np.float32), RATE, subtype="FLOAT")
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(random_model), str(quiet), str(room)]) == 0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert str(quiet) in lines[0] and "very quiet recording" in lines[0] and "dBFS" in lines[0]
    assert str(room) in lines[1] and "no speech found" in lines[1]
    assert f"{room}: \n" in out or out.rstrip().endswith(f"{room}:")  # no invented words for room noise


def test_an_offset_neither_hides_speech_nor_its_pauses(random_model, tiny_synth, tmp_path):
    speech = _speech(tiny_synth)
    assert not is_silent(torch.tensor(0.5 * speech + 0.4, dtype=torch.float32), RATE)
    joined = np.concatenate([speech, np.zeros(RATE), speech, np.zeros(RATE), speech])
    paths = [tmp_path / "plain.wav", tmp_path / "offset.wav"]
    sf.write(paths[0], joined.astype(np.float32), RATE, subtype="FLOAT")
    sf.write(paths[1], (0.5 * joined + 0.3).astype(np.float32), RATE, subtype="FLOAT")
    transcriber = Transcriber.load(random_model, max_chunk_seconds=len(speech) / RATE + 0.5)
    plain, offset = transcriber.transcribe_many(paths)
    assert plain.chunks >= 3 and offset.chunks == plain.chunks  # cut at the same pauses
    assert [seg.start for seg in offset.segments] == [seg.start for seg in plain.segments]
