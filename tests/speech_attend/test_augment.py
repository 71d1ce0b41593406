"""Training conditions: each transform keeps its promise, and only training batches get them."""

from __future__ import annotations

import math
from dataclasses import replace as replace_config

import pytest
import torch

from speech_attend.data.augment import (
    AugmentConfig,
    AugmentedCollate,
    add_noise,
    augment_batch,
    babble,
    change_speed,
    coloured_noise,
    equalize,
    low_sample_rate,
    non_speech,
    pad_silence,
    quantize,
    reverberate,
    room_impulse_response,
    telephone_band,
)
from speech_attend.data.dataset import collate
from speech_attend.train.datamodule import SpeechDataModule

SR = 16000


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _speechlike(seconds: float = 1.0, seed: int = 0) -> torch.Tensor:
    """Bursts of a 300 Hz tone with noise, separated by silence (active and inactive frames)."""
    g = _gen(seed)
    t = torch.arange(int(seconds * SR)) / SR
    on = ((t * 4) % 1 < 0.6).float()  # 150 ms bursts, 100 ms gaps
    return 0.3 * on * (torch.sin(2 * math.pi * 300 * t) + 0.2 * torch.randn(t.numel(), generator=g))


def _band_energy(wave: torch.Tensor, low: float, high: float) -> float:
    spectrum = torch.fft.rfft(wave).abs() ** 2
    freqs = torch.fft.rfftfreq(wave.numel(), 1 / SR)
    return float(spectrum[(freqs >= low) & (freqs < high)].sum())


@pytest.mark.parametrize("factor", [0.9, 0.95, 1.1])
def test_speed_changes_the_length_by_the_factor_and_the_frequency_with_it(factor):
    t = torch.arange(SR) / SR
    wave = 0.5 * torch.sin(2 * math.pi * 400 * t)
    fast = change_speed(wave, factor)
    assert fast.numel() == math.ceil(SR / factor)
    spectrum = torch.fft.rfft(fast[500:-500] * torch.hann_window(fast.numel() - 1000)).abs()
    assert float(spectrum.argmax()) * SR / (fast.numel() - 1000) == pytest.approx(400 * factor, rel=0.01)


def test_silence_pads_add_the_drawn_lengths_with_a_low_noise_floor():
    wave = _speechlike(0.5)
    padded = pad_silence(wave, 1234, 567, -60.0, _gen())
    assert padded.numel() == wave.numel() + 1234 + 567
    torch.testing.assert_close(padded[1234 : 1234 + wave.numel()], wave)
    for pad in (padded[:1234], padded[-567:]):
        rms_db = 20 * math.log10(float(pad.pow(2).mean().sqrt()))
        assert rms_db == pytest.approx(-60.0, abs=1.0)  # a floor, not digital zero


def test_room_impulse_response_starts_with_the_direct_path_and_decays():
    rir = room_impulse_response(0.5, 6.0, SR, _gen())
    assert rir.numel() == SR // 2 and rir[0] == 1.0 and rir.abs().argmax() == 0
    tail = rir[1:]
    assert 10 * math.log10(1.0 / float(tail.pow(2).sum())) == pytest.approx(6.0, abs=1e-3)
    early, late = tail[: SR // 20].pow(2).mean(), tail[-SR // 20 :].pow(2).mean()
    assert 10 * math.log10(float(early / late)) > 40  # about 60 dB over the RT60
    impulse = torch.zeros(SR)
    impulse[100] = 0.5
    wet = reverberate(impulse, rir)
    assert wet.numel() == SR and float(wet[:100].abs().max()) < 1e-6  # FFT round-off only
    assert wet[100] == pytest.approx(0.5) and int(wet.abs().argmax()) == 100
    torch.testing.assert_close(wet[100 : 100 + rir.numel()], 0.5 * rir, atol=1e-6, rtol=0)


@pytest.mark.parametrize("snr_db", [0.0, 10.0, 27.5])
@pytest.mark.parametrize("kind", ["white", "pink", "brown", "babble"])
def test_noise_is_added_at_the_drawn_snr_on_active_speech(snr_db, kind):
    speech = _speechlike(1.0)
    if kind == "babble":
        noise = babble([_speechlike(0.7, seed=s) for s in range(1, 5)], speech.numel(), _gen())
    else:
        noise = coloured_noise(speech.numel(), kind, _gen())
    noisy = add_noise(speech, noise, snr_db)
    added = noisy - speech
    active = torch.cat([speech[i : i + 160] for i in range(0, SR, 160) if (i / SR * 4) % 1 < 0.6 - 0.01])  # the bursts
    measured = 10 * math.log10(float(active.pow(2).mean() / added.pow(2).mean()))
    assert measured == pytest.approx(snr_db, abs=0.5)


def test_noise_colours_have_their_slopes():
    low, high = (100, 400), (3000, 6000)
    slopes = {}
    for colour in ("white", "pink", "brown"):
        noise = coloured_noise(4 * SR, colour, _gen())
        slopes[colour] = _band_energy(noise, *low) / _band_energy(noise, *high)
    # band energy ratios, the integrals of f**-beta: white 300/3000 = 0.1, pink ln(4)/ln(2) = 2,
    # brown (1/100 - 1/400) / (1/3000 - 1/6000) = 45
    assert slopes["white"] == pytest.approx(0.1, rel=0.3)
    assert slopes["pink"] == pytest.approx(2.0, rel=0.3)
    assert slopes["brown"] == pytest.approx(45.0, rel=0.3)


def test_telephone_band_removes_energy_outside_300_to_3400_hz():
    wave = coloured_noise(SR, "white", _gen())
    phone = telephone_band(wave, SR)
    assert phone.numel() == wave.numel()
    assert _band_energy(phone, 0, 295) < 1e-6 * _band_energy(wave, 0, 295)
    assert _band_energy(phone, 3410, 8000) < 1e-6 * _band_energy(wave, 3410, 8000)
    assert _band_energy(phone, 400, 3300) == pytest.approx(_band_energy(wave, 400, 3300), rel=1e-3)


@pytest.mark.parametrize("low_rate", [8000, 11025])
def test_low_sample_rate_removes_what_it_cannot_carry_and_keeps_the_length(low_rate):
    wave = coloured_noise(SR, "white", _gen())
    low = low_sample_rate(wave, SR, low_rate)
    assert low.numel() == wave.numel()
    nyquist = low_rate / 2
    assert _band_energy(low, nyquist + 300, 8000) < 1e-4 * _band_energy(wave, nyquist + 300, 8000)  # 40 dB down
    assert _band_energy(low, 500, nyquist - 500) == pytest.approx(_band_energy(wave, 500, nyquist - 500), rel=0.1)


def test_augment_batch_keeps_lengths_exact_and_output_finite_within_one():
    waves = [_speechlike(s, seed=i) * 3 for i, s in enumerate((0.6, 1.0, 0.8, 0.4, 0.9))]  # peaks above 1
    padded = torch.nn.utils.rnn.pad_sequence(waves, batch_first=True)
    lengths = torch.tensor([w.numel() for w in waves])
    everything = AugmentConfig(
        speed_prob=1,
        silence_prob=1,
        reverb_prob=1,
        noise_prob=1,
        babble_prob=0.5,
        telephone_prob=0.3,
        low_rate_prob=1,
        gain_prob=1,
        gain_db=(0.0, 12.0),
        dc_prob=1,
    )
    for seed in range(2):
        out, new_lengths = augment_batch(padded, lengths, everything, SR, _gen(seed))
        assert out.shape == (5, int(new_lengths.max())) and torch.isfinite(out).all()
        assert float(out.abs().max()) <= 1.0
        for row, n in zip(out, new_lengths):
            assert n > 0.85 * SR * 0.4 and not row[n:].any()  # padding stays zero
    nothing = AugmentConfig(
        speed_prob=0, silence_prob=0, reverb_prob=0, noise_prob=0, telephone_prob=0, low_rate_prob=0, gain_prob=0, dc_prob=0
    )
    same, same_lengths = augment_batch(padded / 4, lengths, nothing, SR, _gen())
    torch.testing.assert_close(same, padded / 4)
    assert torch.equal(same_lengths, lengths)
    with pytest.raises(ValueError, match="speed_prob"):
        AugmentConfig(speed_prob=1.5)
    with pytest.raises(ValueError, match="low_rates must be below the audio's 8000 Hz"):
        SpeechDataModule("unused", sample_rate=8000, augment=AugmentConfig())  # 11025 Hz is no low rate at 8 kHz
    with pytest.raises(ValueError, match="telephone_band must end below 4000 Hz"):
        SpeechDataModule("unused", sample_rate=8000, augment=AugmentConfig(low_rates=(4000,), telephone_band=(300.0, 4500.0)))


def test_only_training_batches_are_augmented(tiny_synth):
    loud = AugmentConfig(speed_prob=1, noise_prob=1, snr_db=(0.0, 0.0), silence_prob=1)
    plain = SpeechDataModule(str(tiny_synth), batch_size=4, eval_batch_size=4, cache_audio=True)
    augmented = SpeechDataModule(str(tiny_synth), batch_size=4, eval_batch_size=4, cache_audio=True, augment=loud)
    for module in (plain, augmented):
        module.setup("fit")
        module.setup("test")
    assert augmented.hparams.augment["snr_db"] == (0.0, 0.0)  # saved as plain data
    for name in ("val_dataloader", "test_dataloader"):
        for a, b in zip(getattr(plain, name)(), getattr(augmented, name)()):
            assert torch.equal(a.waveforms, b.waveforms) and torch.equal(a.lengths, b.lengths)
    train_plain, train_augmented = next(iter(plain.train_dataloader())), next(iter(augmented.train_dataloader()))
    assert train_plain.keys == train_augmented.keys
    assert not torch.equal(train_plain.lengths, train_augmented.lengths)


def test_conditions_wait_for_start_step_then_their_chances_ramp_up():
    config = AugmentConfig(start_step=10, ramp_steps=10)
    assert [config.strength(s) for s in (0, 9, 10, 14, 19, 500)] == [0.0, 0.0, 0.1, 0.5, 1.0, 1.0]
    half = config.scaled(0.5)
    assert half.noise_prob == config.noise_prob / 2 and half.speed_prob == config.speed_prob / 2
    assert half.babble_prob == config.babble_prob  # a choice between noises, not a chance of one
    with pytest.raises(ValueError, match="start_step and ramp_steps"):
        AugmentConfig(start_step=-1)


@pytest.mark.parametrize("workers", [0, 1])
def test_the_training_loader_serves_clean_audio_until_start_step_also_from_loader_processes(tiny_synth, workers):
    loud = AugmentConfig(speed_prob=1, noise_prob=1, snr_db=(0.0, 0.0), silence_prob=1, start_step=100)
    plain = SpeechDataModule(str(tiny_synth), batch_size=8, cache_audio=True)
    augmented = SpeechDataModule(str(tiny_synth), batch_size=8, cache_audio=True, augment=loud, num_workers=workers)
    for module in (plain, augmented):
        module.setup("fit")
    clean = next(iter(plain.train_dataloader()))
    loader = augmented.train_dataloader()
    assert torch.equal(next(iter(loader)).waveforms, clean.waveforms)  # step 0: before start_step
    augmented._augmented.set_step(100)  # what on_before_batch_transfer does as training reaches it
    assert not torch.equal(next(iter(loader)).lengths, clean.lengths)


@pytest.mark.parametrize("bits", [8, 16])
def test_quantize_rounds_to_the_grid_of_a_file_of_that_bit_depth(bits):
    wave = _speechlike() * 10 ** (-50 / 20)  # a microphone set 50 dB too low
    rounded = quantize(wave, bits)
    steps = 2 ** (bits - 1)
    assert torch.equal(rounded * steps, (rounded * steps).round())  # on the grid
    assert float((rounded - wave).abs().max()) <= 0.5 / steps + 1e-9  # the nearest level
    assert int((rounded * steps).unique().numel()) < int(wave.unique().numel())  # levels were lost
    assert float(quantize(torch.tensor([1.0]), bits)) == (steps - 1) / steps  # full scale stays inside


@pytest.mark.parametrize("kind", ["noise", "hum", "tones", "floor"])
def test_non_speech_sounds_have_the_drawn_level_and_are_finite(kind):
    sound = non_speech(SR, kind, -30.0, SR, _gen())
    assert sound.shape == (SR,) and torch.isfinite(sound).all()
    rms_dbfs = 20 * math.log10(float(sound.pow(2).mean().sqrt()))
    assert rms_dbfs == pytest.approx(-70.0 if kind == "floor" else -30.0, abs=0.01)


def test_non_speech_utterances_get_the_empty_transcript_and_the_rest_keep_theirs():
    waves = [_speechlike(0.5, seed=i) for i in range(64)]
    items = [(w, f"words {i}", f"u{i}") for i, w in enumerate(waves)]
    plain = AugmentConfig(
        speed_prob=0, silence_prob=0, reverb_prob=0, noise_prob=0, telephone_prob=0, low_rate_prob=0, gain_prob=0, dc_prob=0
    )
    torch.manual_seed(0)
    batch = AugmentedCollate(collate, replace_config(plain, non_speech_prob=0.25), SR)(items)
    emptied = [i for i, text in enumerate(batch.texts) if text == ""]
    assert 4 <= len(emptied) <= 30  # about a quarter
    for i, text in enumerate(batch.texts):
        same = torch.equal(batch.waveforms[i, : waves[i].numel()], waves[i])
        assert same == (i not in emptied) and (i in emptied or text == f"words {i}")
        assert int(batch.lengths[i]) == waves[i].numel()
    assert AugmentedCollate(collate, plain, SR)(items).texts == [f"words {i}" for i in range(64)]


def test_quantized_training_conditions_stay_on_a_16_bit_grid_at_most():
    waves = [_speechlike(0.5, seed=i) * 0.01 for i in range(4)]
    padded = torch.nn.utils.rnn.pad_sequence(waves, batch_first=True)
    lengths = torch.tensor([w.numel() for w in waves])
    only = AugmentConfig(
        speed_prob=0,
        silence_prob=0,
        reverb_prob=0,
        noise_prob=0,
        telephone_prob=0,
        low_rate_prob=0,
        gain_prob=0,
        dc_prob=0,
        quantize_prob=1,
    )
    out, _ = augment_batch(padded, lengths, only, SR, _gen())
    assert torch.equal(out * 2**15, (out * 2**15).round()) and not torch.equal(out, padded)
    with pytest.raises(ValueError, match="quantize_bits"):
        AugmentConfig(quantize_bits=(1, 16))


_ONLY_VOICE = dict(
    speed_prob=0,
    silence_prob=0,
    reverb_prob=0,
    noise_prob=0,
    telephone_prob=0,
    low_rate_prob=0,
    gain_prob=0,
    dc_prob=0,
    voice_shift_prob=1,
)


def _dominant_hz(wave: torch.Tensor) -> float:
    spectrum = torch.fft.rfft(wave).abs()
    return float(torch.fft.rfftfreq(wave.numel(), 1 / SR)[spectrum.argmax()])


def test_another_voice_raises_the_pitch_by_the_drawn_semitones_and_keeps_the_length():
    t = torch.arange(SR) / SR
    voice = 0.3 * sum(torch.sin(2 * math.pi * 150 * k * t) / k for k in (1, 2, 3))  # a 150 Hz voice, three harmonics
    padded, lengths = voice[None], torch.tensor([SR])
    out, new_lengths = augment_batch(
        padded, lengths, AugmentConfig(**_ONLY_VOICE, voice_semitones=(12.0, 12.0), voice_formant_ratio=(2.0, 2.0)), SR, _gen()
    )
    assert new_lengths.tolist() == [SR] and torch.isfinite(out).all()
    assert _dominant_hz(out[0]) == pytest.approx(300, abs=5)  # an octave up
    unchanged, _ = augment_batch(padded, lengths, AugmentConfig(**{**_ONLY_VOICE, "voice_shift_prob": 0}), SR, _gen())
    assert torch.equal(unchanged, padded)


def test_the_voice_shift_never_draws_the_held_out_piper_shifts(monkeypatch):
    """piper_unseen's speakers are piper at half-semitone and midpoint formant shifts inside the
    training grid (-4..4 semitones, 0.88..1.12): the condition's default ranges lie above both."""
    from speech_attend.builtin.speakers import PIPER_FORMANT_RATIOS, PIPER_SEMITONES, piper_speakers
    from speech_attend.data import augment

    drawn = []
    monkeypatch.setattr(augment, "shift_voice", lambda wave, rate, semitones, ratio: drawn.append((semitones, ratio)) or wave)
    waves = torch.randn(8, 4000) * 0.1
    for seed in range(5):
        augment_batch(waves, torch.full((8,), 4000), AugmentConfig(**_ONLY_VOICE), SR, _gen(seed))
    assert len(drawn) == 40
    held_out = [s for s in piper_speakers() if s.split != "train"]
    assert held_out and all(
        s.semitones < min(p[0] for p in drawn) and s.formant_ratio < min(p[1] for p in drawn) for s in held_out
    )
    assert (
        max(PIPER_SEMITONES) < AugmentConfig().voice_semitones[0]
        and max(PIPER_FORMANT_RATIOS) < AugmentConfig().voice_formant_ratio[0]
    )


def _tone_gain_db(out: torch.Tensor, wave: torch.Tensor, hz: float) -> float:
    return 20 * math.log10(_band_energy(out, hz - 5, hz + 5) ** 0.5 / _band_energy(wave, hz - 5, hz + 5) ** 0.5)


def test_the_timbre_equaliser_tilts_by_its_db_per_octave_and_adds_its_peaks():
    t = torch.arange(SR) / SR
    wave = sum(0.1 * torch.sin(2 * math.pi * hz * t) for hz in (250.0, 1000.0, 4000.0))
    tilted = equalize(wave, SR, tilt_db=2.0)
    assert [_tone_gain_db(tilted, wave, hz) for hz in (250.0, 1000.0, 4000.0)] == pytest.approx([-4.0, 0.0, 4.0], abs=0.05)
    peaked = equalize(wave, SR, tilt_db=0.0, bands=[(1000.0, 8.0, 0.3)])
    assert [_tone_gain_db(peaked, wave, hz) for hz in (250.0, 1000.0, 4000.0)] == pytest.approx([0.0, 8.0, 0.0], abs=0.05)


def test_the_timbre_condition_changes_the_spectrum_not_the_length():
    wave = _speechlike()
    only = AugmentConfig(**{**_ONLY_VOICE, "voice_shift_prob": 0, "timbre_prob": 1})
    out, lengths = augment_batch(wave[None], torch.tensor([SR]), only, SR, _gen())
    assert lengths.tolist() == [SR] and torch.isfinite(out).all() and not torch.allclose(out, wave[None], atol=1e-3)
    unchanged, _ = augment_batch(wave[None], torch.tensor([SR]), replace_config(only, timbre_prob=0), SR, _gen())
    assert torch.equal(unchanged, wave[None])


@pytest.mark.parametrize(
    "field, bad",
    [
        ("voice_semitones", (5.0, 30.0)),
        ("voice_formant_ratio", (0.0, 1.2)),
        ("dc_offset", (-0.3, 1.5)),
        ("quantize_bits", (8, 30)),
        ("timbre_bands", (-1, 2)),
        ("timbre_band_octaves", (0.0, 1.0)),
        ("timbre_tilt_db", (2.0, -2.0)),
    ],
)
def test_ranges_outside_their_bounds_are_refused(field, bad):
    with pytest.raises(ValueError, match=field):
        AugmentConfig(**{field: bad})


def test_each_reference_is_its_utterance_through_the_same_voice_speed_room_and_channel_without_what_was_added():
    waves = [_speechlike(s, seed=i) for i, s in enumerate((0.6, 1.0, 0.8))]
    padded = torch.nn.utils.rnn.pad_sequence(waves, batch_first=True)
    lengths = torch.tensor([w.numel() for w in waves])
    added = AugmentConfig(
        speed_prob=0,
        silence_prob=0,
        reverb_prob=0,
        noise_prob=1,
        babble_prob=0.5,
        telephone_prob=0,
        low_rate_prob=0,
        gain_prob=1,
        gain_db=(-50.0, -40.0),
        dc_prob=1,
        quantize_prob=1,
        quantize_bits=(16, 16),
    )
    out, new_lengths, references = augment_batch(padded, lengths, added, SR, _gen(), references=True)
    assert torch.equal(new_lengths, lengths) and references.shape == out.shape
    torch.testing.assert_close(references, padded)  # nothing before the noise: the input itself
    assert not torch.equal(out, padded)
    # What changes the length or the channel reaches both: the reference keeps each utterance's length.
    shaped = AugmentConfig(
        speed_prob=1, silence_prob=1, reverb_prob=1, noise_prob=1, telephone_prob=1, low_rate_prob=0, gain_prob=0, dc_prob=0
    )
    out, new_lengths, references = augment_batch(padded, lengths, shaped, SR, _gen(3), references=True)
    assert not torch.equal(new_lengths, lengths) and references.shape == out.shape
    for row, reference, n in zip(out, references, new_lengths.tolist()):
        assert not reference[n:].any() and reference[:n].abs().sum() > 0
        assert _band_energy(reference[:n], 3500, 8000) < 1e-6 * _band_energy(reference[:n], 400, 3300)  # the telephone band
        assert not torch.allclose(reference[:n], row[:n])  # the noise went to the utterance alone
    # The same draws with or without references: the training audio does not change.
    again, _ = augment_batch(padded, lengths, shaped, SR, _gen(3))
    torch.testing.assert_close(again, out)
