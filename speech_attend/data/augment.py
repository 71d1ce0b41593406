"""Acoustic conditions added to training waveforms on the fly: voice, speed, silence, room, noise, channel, gain.

A recognizer trained on clean synthetic speech meets, at test time, other rooms, microphones,
noise and levels. Each training utterance draws its own conditions every time it is served
(Ko et al. 2015 for speed perturbation; Rosenberg et al. 2019 for augmenting synthetic speech),
in this order:

0. voice: pitch raised by 5 to 12 semitones and formants by 14 to 26 % (:func:`shift_voice`), a
   voice in the range of women's and children's, which the built-in speakers barely cover (piper's
   one male voice spans -4 to +4 semitones and formant ratios 0.88 to 1.12, whose held-out shifts
   these ranges never touch);
1. timbre: a smooth random equaliser (:func:`equalize`: a spectral tilt and a few broad peaks or
   dips), as another microphone, vocal tract or vocoder colours a voice;
2. speed: resampled by a factor in ``speed_range`` (tempo and pitch change together);
3. silence: random leading and trailing pads with a low noise floor (never digital zero);
4. reverberation: convolution with a simulated room impulse response, a direct-path impulse
   followed by exponentially decaying noise, ``n(t) exp(-6.9 t / RT60)``;
5. noise: coloured (white, pink or brown) or babble (the sum of 3 to 7 other utterances of the
   batch), at an SNR measured on the utterance's active speech;
6. channel: a telephone band (300 to 3400 Hz), or a low sample rate (down to 8 kHz and back);
7. gain (down to -50 dB: a microphone set far too low) and a constant offset (DC, as cheap sound
   cards add), then scaling down (never clipping) any utterance whose peak would exceed 1;
8. bit depth: rounding to the sample grid of an 8- to 16-bit file, which is what a quiet 16-bit
   recording loses (at -50 dB its speech spans a few hundred of the 65,536 steps).

Besides, a few utterances are replaced by a sound that holds no speech (coloured noise, mains hum,
a melody of tones, a noise floor) and their transcript by the empty one: a recognizer that never
met such a sound writes words for it, since the front end brings every input up to speech level.

Dev and test data never pass through here: :class:`AugmentedCollate` wraps only the training
loader's collate function. SpecAugment, on the features, stays in :mod:`speech_attend.model.features`.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable

import torch
from torchaudio.functional import fftconvolve
from torchaudio.transforms import Resample

from speech_attend.data.voice_shift import shift_voice

__all__ = [
    "AugmentConfig",
    "augment_batch",
    "AugmentedCollate",
    "equalize",
    "change_speed",
    "pad_silence",
    "room_impulse_response",
    "reverberate",
    "coloured_noise",
    "babble",
    "active_power",
    "add_noise",
    "telephone_band",
    "low_sample_rate",
    "quantize",
    "non_speech",
]

_FRAME_SECONDS = 0.01
_ACTIVE_DB = -40.0  # a frame within 40 dB of the speech level (95th percentile frame) is active speech
_NOISE_COLOURS = {"white": 0.0, "pink": 1.0, "brown": 2.0}  # power spectrum ~ 1 / f**beta
_CHANCES = ("voice_shift_prob", "timbre_prob", "speed_prob", "silence_prob", "reverb_prob", "noise_prob", "telephone_prob", "low_rate_prob",
            "gain_prob", "dc_prob", "quantize_prob", "non_speech_prob")
_NON_SPEECH = ("noise", "hum", "tones", "floor")
_TIMBRE_CENTRES_HZ = (150.0, 6000.0)  # where a peak or dip of the equaliser may sit (drawn log-uniformly)


@dataclass
class AugmentConfig:
    """Chances and ranges of the training conditions (each drawn per utterance)."""

    voice_shift_prob: float = 0.0  # chance of another voice (pitch and formants raised), before every other condition
    voice_semitones: tuple[float, float] = (5.0, 12.0)  # its pitch shift
    voice_formant_ratio: tuple[float, float] = (1.14, 1.26)  # its formant shift
    timbre_prob: float = 0.0  # chance of another timbre: a smooth random equaliser, after the voice
    timbre_tilt_db: tuple[float, float] = (-2.0, 2.0)  # its spectral tilt, dB per octave (around 1 kHz)
    timbre_bands: tuple[int, int] = (1, 3)  # its peaks and dips, how many
    timbre_band_db: tuple[float, float] = (-8.0, 8.0)  # each one's gain
    timbre_band_octaves: tuple[float, float] = (0.3, 1.0)  # each one's width (a Gaussian's deviation on the octave scale)
    speed_prob: float = 0.5  # chance of a speed change
    speed_range: tuple[float, float] = (0.9, 1.1)  # factor, above 1 is faster (shorter); steps of 0.01
    silence_prob: float = 0.5  # chance of leading and trailing silence
    silence_seconds: tuple[float, float] = (0.0, 0.6)  # length of each pad
    floor_dbfs: tuple[float, float] = (-80.0, -55.0)  # RMS of the pads' noise floor
    reverb_prob: float = 0.3  # chance of a room
    rt60_seconds: tuple[float, float] = (0.2, 0.8)  # time for the reverberation to decay by 60 dB
    direct_to_reverb_db: tuple[float, float] = (0.0, 12.0)  # energy of the direct path over the tail's
    noise_prob: float = 0.5  # chance of additive noise
    snr_db: tuple[float, float] = (0.0, 30.0)  # against the active speech
    babble_prob: float = 0.5  # chance that the noise is babble rather than coloured noise
    babble_talkers: tuple[int, int] = (3, 7)  # other utterances summed into babble (fewer in small batches)
    telephone_prob: float = 0.1  # chance of the telephone band
    telephone_band: tuple[float, float] = (300.0, 3400.0)  # Hz kept
    low_rate_prob: float = 0.1  # chance of a low sample rate (when not telephone band)
    low_rates: tuple[int, ...] = (8000, 11025, 12000)  # Hz, drawn uniformly
    gain_prob: float = 0.5  # chance of a gain change
    gain_db: tuple[float, float] = (-50.0, 6.0)  # level change
    dc_prob: float = 0.2  # chance of a constant offset
    dc_offset: tuple[float, float] = (-0.3, 0.3)  # added to every sample, full scale 1.0
    quantize_prob: float = 0.0  # chance of rounding to the sample grid of a file
    quantize_bits: tuple[int, int] = (8, 16)  # its bit depth, drawn uniformly
    non_speech_prob: float = 0.0  # chance that an utterance becomes a sound without speech, transcript ""
    non_speech_dbfs: tuple[float, float] = (-60.0, -10.0)  # RMS of that sound
    start_step: int = 0  # training steps on clean audio first (the alignment forms faster there)
    ramp_steps: int = 0  # then every chance above grows linearly to its value over this many steps

    def __post_init__(self):
        for name in (*_CHANCES, "babble_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {getattr(self, name)}")
        for name in ("voice_semitones", "voice_formant_ratio", "timbre_tilt_db", "timbre_bands", "timbre_band_db",
                     "timbre_band_octaves", "speed_range", "silence_seconds", "floor_dbfs", "rt60_seconds",
                     "direct_to_reverb_db", "snr_db", "babble_talkers", "telephone_band", "gain_db", "dc_offset", "quantize_bits",
                     "non_speech_dbfs"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"{name} must be (low, high) with low <= high, got {getattr(self, name)}")
        if not (-24 <= self.voice_semitones[0] and self.voice_semitones[1] <= 24) or self.voice_formant_ratio[0] <= 0:
            raise ValueError(f"voice_semitones must lie in [-24, 24] and voice_formant_ratio be positive, got "
                             f"{self.voice_semitones} and {self.voice_formant_ratio}")
        if self.timbre_bands[0] < 0 or self.timbre_band_octaves[0] <= 0:
            raise ValueError(f"timbre_bands must be >= 0 and timbre_band_octaves positive, got {self.timbre_bands} and "
                             f"{self.timbre_band_octaves}")
        if self.speed_range[0] <= 0 or self.rt60_seconds[0] <= 0 or self.silence_seconds[0] < 0 or self.babble_talkers[0] < 1:
            raise ValueError(f"speed factors and RT60 must be positive, silence >= 0 and babble talkers >= 1, got {self}")
        if not (-1.0 < self.dc_offset[0] and self.dc_offset[1] < 1.0):
            raise ValueError(f"dc_offset must lie inside (-1, 1), got {self.dc_offset}")
        if not (2 <= self.quantize_bits[0] and self.quantize_bits[1] <= 24):
            raise ValueError(f"quantize_bits must lie in [2, 24], got {self.quantize_bits}")
        if not 0 < self.telephone_band[0] < self.telephone_band[1]:
            raise ValueError(f"telephone_band must be (low, high) Hz with 0 < low < high, got {self.telephone_band}")
        if not self.low_rates or any(r <= 0 for r in self.low_rates):
            raise ValueError(f"low_rates must be positive rates in Hz, got {self.low_rates}")
        if self.start_step < 0 or self.ramp_steps < 0:
            raise ValueError(f"start_step and ramp_steps must be >= 0, got {self.start_step} and {self.ramp_steps}")

    def strength(self, step: int) -> float:
        """How much of each chance applies at training step ``step``: 0 before ``start_step``, then
        rising linearly to 1 over ``ramp_steps``."""
        if step < self.start_step:
            return 0.0
        return 1.0 if self.ramp_steps == 0 else min(1.0, (step - self.start_step + 1) / self.ramp_steps)

    def scaled(self, strength: float) -> "AugmentConfig":
        """The same conditions with each chance of applying one multiplied by ``strength``
        (``babble_prob``, a choice between two kinds of noise, stays)."""
        return replace(self, **{name: getattr(self, name) * strength for name in _CHANCES})

    def check(self, sample_rate: int) -> None:
        """Raise ``ValueError`` unless the band and the low rates fit audio at ``sample_rate`` Hz."""
        if self.telephone_band[1] >= sample_rate / 2:
            raise ValueError(f"augment.telephone_band must end below {sample_rate / 2:g} Hz for {sample_rate} Hz audio, got {self.telephone_band}")
        if any(r >= sample_rate for r in self.low_rates):
            raise ValueError(f"augment.low_rates must be below the audio's {sample_rate} Hz, got {self.low_rates}")


def _uniform(bounds: tuple[float, float], generator: torch.Generator | None) -> float:
    low, high = bounds
    return low + (high - low) * float(torch.rand((), generator=generator))


def _chance(p: float, generator: torch.Generator | None) -> bool:
    return p > 0 and float(torch.rand((), generator=generator)) < p


def _pick(n: int, generator: torch.Generator | None) -> int:
    return int(torch.randint(n, (), generator=generator))


# A long Kaiser-windowed sinc for the low sample rates: about 60 dB down above the new Nyquist
# frequency (the default kernel leaves aliases only 25 to 30 dB down).
_SHARP = {"lowpass_filter_width": 16, "rolloff": 0.9, "resampling_method": "sinc_interp_kaiser", "beta": 8.6}


@functools.cache
def _resampler(orig_freq: int, new_freq: int, sharp: bool = False) -> Resample:
    return Resample(orig_freq, new_freq, **(_SHARP if sharp else {}))  # the kernel is built once per pair of rates


def _resample(wave: torch.Tensor, orig_freq: int, new_freq: int, sharp: bool = False) -> torch.Tensor:
    with torch.no_grad():
        return _resampler(orig_freq, new_freq, sharp)(wave)


def change_speed(wave: torch.Tensor, factor: float) -> torch.Tensor:
    """Play ``wave`` ``factor`` times faster by resampling: `(T,)` -> `(ceil(T / factor),)`.

    The factor is rounded to a fraction with a denominator of at most 100 (0.9 -> 9/10).
    """
    ratio = Fraction(factor).limit_denominator(100)
    if ratio == 1:
        return wave
    return _resample(wave, ratio.numerator, ratio.denominator)


def pad_silence(wave: torch.Tensor, lead: int, trail: int, floor_dbfs: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """``lead`` and ``trail`` samples of white noise at ``floor_dbfs`` RMS around ``wave``: `(T,)` -> `(lead + T + trail,)`."""
    level = 10 ** (floor_dbfs / 20)
    before = torch.randn(lead, generator=generator) * level
    after = torch.randn(trail, generator=generator) * level
    return torch.cat([before, wave, after])


def room_impulse_response(rt60: float, direct_to_reverb_db: float, sample_rate: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A simulated room: a unit direct-path impulse, then Gaussian noise decaying as ``exp(-6.9 t / rt60)``.

    Args:
        rt60 (float): seconds for the tail to decay by 60 dB (its length).
        direct_to_reverb_db (float): energy of the direct path over the energy of the tail.
        sample_rate (int): Hz.
        generator (torch.Generator or None, optional): source of randomness. (Default: ``None``)

    Returns:
        torch.Tensor: impulse response with shape `(round(rt60 * sample_rate),)`, ``h[0] = 1``.
    """
    length = max(2, round(rt60 * sample_rate))
    t = torch.arange(1, length) / sample_rate
    tail = torch.randn(length - 1, generator=generator) * torch.exp(-6.9 * t / rt60)
    tail = tail * math.sqrt(10 ** (-direct_to_reverb_db / 10) / float(tail.pow(2).sum()))
    return torch.cat([torch.ones(1), tail])


def reverberate(wave: torch.Tensor, rir: torch.Tensor) -> torch.Tensor:
    """``wave`` `(T,)` convolved (FFT) with ``rir``, cut to `(T,)`: the tail past the end is dropped."""
    return fftconvolve(wave, rir)[: wave.numel()]


def coloured_noise(length: int, colour: str, generator: torch.Generator | None = None) -> torch.Tensor:
    """Noise `(length,)` of unit RMS whose power spectrum falls as ``1 / f ** beta``: white 0, pink 1, brown 2."""
    if colour not in _NOISE_COLOURS:
        raise ValueError(f"colour must be one of {', '.join(_NOISE_COLOURS)}, got {colour!r}")
    spectrum = torch.fft.rfft(torch.randn(length, generator=generator))
    freqs = torch.arange(spectrum.numel(), dtype=torch.float32).clamp_min(1.0)  # leave DC at the first bin's level
    noise = torch.fft.irfft(spectrum / freqs ** (_NOISE_COLOURS[colour] / 2), n=length)
    return noise / noise.pow(2).mean().sqrt().clamp_min(1e-12)


def babble(others: list[torch.Tensor], length: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The sum of ``others`` (other utterances, each repeated to ``length`` from a random start,
    each at unit active power), as ``(length,)`` of unit RMS: many people talking at once."""
    total = torch.zeros(length)
    for other in others:
        other = other / active_power(other).sqrt().clamp_min(1e-12)
        repeats = -(-(length + other.numel()) // max(1, other.numel()))
        start = _pick(max(1, other.numel()), generator)
        total += other.repeat(repeats)[start: start + length]
    return total / total.pow(2).mean().sqrt().clamp_min(1e-12)


def active_power(wave: torch.Tensor, sample_rate: int = 16000) -> torch.Tensor:
    """Mean power of the active speech of ``wave`` `(T,)`: its 10 ms frames within 40 dB of the
    speech level (the 95th percentile of frame power). A scalar tensor."""
    hop = max(1, round(_FRAME_SECONDS * sample_rate))
    frames = wave[: wave.numel() // hop * hop].reshape(-1, hop) if wave.numel() >= hop else wave.reshape(1, -1)
    power = frames.pow(2).mean(dim=1)  # (frames,)
    level = torch.quantile(power, 0.95)
    return power[power >= level * 10 ** (_ACTIVE_DB / 10)].mean()


def add_noise(wave: torch.Tensor, noise: torch.Tensor, snr_db: float, sample_rate: int = 16000) -> torch.Tensor:
    """``wave + noise`` with the noise scaled so that active speech power over mean noise power is ``snr_db``.

    Args:
        wave (torch.Tensor): speech `(T,)`.
        noise (torch.Tensor): noise `(T,)`.
        snr_db (float): signal-to-noise ratio in dB.
        sample_rate (int, optional): Hz. (Default: ``16000``)

    Returns:
        torch.Tensor: `(T,)`.
    """
    speech = active_power(wave, sample_rate)
    scale = torch.sqrt(speech / (noise.pow(2).mean().clamp_min(1e-20) * 10 ** (snr_db / 10)))
    return wave + noise * scale


def equalize(wave: torch.Tensor, sample_rate: int, tilt_db: float, bands: list[tuple[float, float, float]] = ()) -> torch.Tensor:
    """``wave`` `(T,)` through a smooth zero-phase equaliser: `(T,)`. Its gain in dB at frequency
    ``f``, on the octave scale ``o = log2(f / 1 kHz)``, is ``tilt_db * o`` plus, for each band
    ``(centre Hz, gain dB, width octaves)``, ``gain * exp(-(o - o_centre)**2 / (2 width**2))``."""
    freqs = torch.fft.rfftfreq(wave.numel(), 1 / sample_rate)
    octaves = torch.log2(freqs.clamp_min(20.0) / 1000.0)  # DC as 20 Hz: the front end removes it anyway
    gain_db = tilt_db * octaves
    for centre, gain, width in bands:
        gain_db = gain_db + gain * torch.exp(-0.5 * ((octaves - math.log2(centre / 1000.0)) / width) ** 2)
    return _zero_phase(wave, 10 ** (gain_db / 20))


def _zero_phase(wave: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """``wave`` `(T,)` with its spectrum multiplied by ``response`` `(T // 2 + 1,)`, a real gain per
    ``torch.fft.rfftfreq`` bin: `(T,)`."""
    return torch.fft.irfft(torch.fft.rfft(wave) * response, n=wave.numel())


def _timbre(wave: torch.Tensor, rate: int, config: AugmentConfig, generator) -> torch.Tensor:
    low, high = config.timbre_bands
    lowest_hz, highest_hz = _TIMBRE_CENTRES_HZ
    bands = [(lowest_hz * (highest_hz / lowest_hz) ** _uniform((0.0, 1.0), generator),  # log-uniform centre
              _uniform(config.timbre_band_db, generator), _uniform(config.timbre_band_octaves, generator))
             for _ in range(low + _pick(high - low + 1, generator))]
    return equalize(wave, rate, _uniform(config.timbre_tilt_db, generator), bands)


def telephone_band(wave: torch.Tensor, sample_rate: int, band: tuple[float, float] = (300.0, 3400.0)) -> torch.Tensor:
    """Keep only the frequencies inside ``band`` (Hz) of ``wave`` `(T,)`, as a telephone line does."""
    freqs = torch.fft.rfftfreq(wave.numel(), 1 / sample_rate)
    return _zero_phase(wave, ((freqs >= band[0]) & (freqs <= band[1])).to(wave.dtype))


def low_sample_rate(wave: torch.Tensor, sample_rate: int, low_rate: int) -> torch.Tensor:
    """``wave`` `(T,)` resampled to ``low_rate`` and back, length kept: nothing above ``low_rate / 2`` remains."""
    back = _resample(_resample(wave, sample_rate, low_rate, sharp=True), low_rate, sample_rate, sharp=True)
    if back.numel() >= wave.numel():
        return back[: wave.numel()]
    return torch.nn.functional.pad(back, (0, wave.numel() - back.numel()))


def quantize(wave: torch.Tensor, bits: int) -> torch.Tensor:
    """``wave`` `(T,)` in [-1, 1] rounded to the ``2 ** bits`` levels of a ``bits``-bit file: `(T,)`."""
    steps = 2 ** (bits - 1)
    return (wave * steps).round().clamp(-steps, steps - 1) / steps


def non_speech(length: int, kind: str, rms_dbfs: float, sample_rate: int = 16000, generator: torch.Generator | None = None) -> torch.Tensor:
    """A sound without speech `(length,)` at ``rms_dbfs`` RMS: ``noise`` (white, pink or brown),
    ``hum`` (50 or 60 Hz and two harmonics), ``tones`` (a melody of quarter-second notes over two
    octaves, three harmonics each) or ``floor`` (white noise 40 dB lower)."""
    if kind not in _NON_SPEECH:
        raise ValueError(f"kind must be one of {', '.join(_NON_SPEECH)}, got {kind!r}")
    t = torch.arange(length) / sample_rate
    if kind == "noise":
        wave = coloured_noise(length, list(_NOISE_COLOURS)[_pick(len(_NOISE_COLOURS), generator)], generator)
    elif kind == "hum":
        mains = 50.0 if _chance(0.5, generator) else 60.0
        wave = sum(torch.sin(2 * math.pi * mains * k * t) / k for k in (1, 2, 3))
    elif kind == "tones":
        note = sample_rate // 4
        pitches = 220.0 * 2 ** (torch.randint(24, (length // note + 1,), generator=generator) / 12)  # (notes,)
        pitch = pitches.repeat_interleave(note)[:length]  # (T,)
        within = (torch.arange(length) % note) / sample_rate
        wave = sum(torch.sin(2 * math.pi * pitch * k * within) / k for k in (1, 2, 3)) * torch.exp(-3 * within)
    else:
        wave, rms_dbfs = torch.randn(length, generator=generator), rms_dbfs - 40
    wave = wave / wave.pow(2).mean().sqrt().clamp_min(1e-12)
    return wave * 10 ** (rms_dbfs / 20)


def _noise(wave: torch.Tensor, clean: list[torch.Tensor], index: int, config: AugmentConfig, generator) -> torch.Tensor:
    others = [w for j, w in enumerate(clean) if j != index]
    if others and _chance(config.babble_prob, generator):
        talkers = config.babble_talkers[0] + _pick(config.babble_talkers[1] - config.babble_talkers[0] + 1, generator)
        chosen = [others[_pick(len(others), generator)] for _ in range(talkers)]
        return babble(chosen, wave.numel(), generator)
    colour = list(_NOISE_COLOURS)[_pick(len(_NOISE_COLOURS), generator)]
    return coloured_noise(wave.numel(), colour, generator)


def _augment_one(
    wave: torch.Tensor, clean: list[torch.Tensor], index: int, config: AugmentConfig, rate: int, generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The utterance under its conditions, and its reference: the same utterance through the same
    voice, speed, silence, room and channel, without the noise, gain, offset and rounding (the
    same length)."""
    if _chance(config.voice_shift_prob, generator):
        wave = shift_voice(wave, rate, _uniform(config.voice_semitones, generator), _uniform(config.voice_formant_ratio, generator))
    if _chance(config.timbre_prob, generator):
        wave = _timbre(wave, rate, config, generator)
    if _chance(config.speed_prob, generator):
        wave = change_speed(wave, round(_uniform(config.speed_range, generator), 2))
    if _chance(config.silence_prob, generator):
        lead, trail = (round(_uniform(config.silence_seconds, generator) * rate) for _ in range(2))
        wave = pad_silence(wave, lead, trail, _uniform(config.floor_dbfs, generator), generator)
    if _chance(config.reverb_prob, generator):
        rir = room_impulse_response(_uniform(config.rt60_seconds, generator), _uniform(config.direct_to_reverb_db, generator),
                                    rate, generator)
        wave = reverberate(wave, rir)
    reference = wave
    if _chance(config.noise_prob, generator):
        wave = add_noise(wave, _noise(wave, clean, index, config, generator), _uniform(config.snr_db, generator), rate)
    if _chance(config.telephone_prob, generator):
        channel = functools.partial(telephone_band, sample_rate=rate, band=config.telephone_band)
    elif _chance(config.low_rate_prob, generator):
        channel = functools.partial(low_sample_rate, sample_rate=rate, low_rate=config.low_rates[_pick(len(config.low_rates), generator)])
    else:
        channel = None
    if channel is not None:  # a deterministic filter: the reference goes through it too
        wave, reference = channel(wave), channel(reference)
    if _chance(config.gain_prob, generator):
        wave = wave * 10 ** (_uniform(config.gain_db, generator) / 20)
    if _chance(config.dc_prob, generator):
        wave = wave + _uniform(config.dc_offset, generator)
    wave = torch.nan_to_num(wave, nan=0.0, posinf=0.0, neginf=0.0)
    peak = float(wave.abs().max()) if wave.numel() else 0.0
    wave = wave / peak if peak > 1.0 else wave  # scaled, not clipped
    if _chance(config.quantize_prob, generator):
        low, high = config.quantize_bits
        wave = quantize(wave, low + _pick(high - low + 1, generator))
    return wave, torch.nan_to_num(reference, nan=0.0, posinf=0.0, neginf=0.0)


def _without_speech(waveforms: torch.Tensor, lengths: torch.Tensor, config: AugmentConfig, rate: int, generator) -> list[int]:
    """Replace some utterances of ``waveforms`` `(B, N)` in place by sounds without speech, of the
    same length; the indices replaced."""
    replaced = [i for i in range(waveforms.size(0)) if _chance(config.non_speech_prob, generator)]
    for i in replaced:
        n = int(lengths[i])
        kind = _NON_SPEECH[_pick(len(_NON_SPEECH), generator)]
        waveforms[i, :n] = non_speech(n, kind, _uniform(config.non_speech_dbfs, generator), rate, generator)
    return replaced


def augment_batch(
    waveforms: torch.Tensor, lengths: torch.Tensor, config: AugmentConfig, sample_rate: int = 16000,
    generator: torch.Generator | None = None, references: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw and apply the training conditions to each utterance of a padded batch.

    Args:
        waveforms (torch.Tensor): zero-padded audio with shape `(B, N)`.
        lengths (torch.Tensor): samples per waveform `(B,)`.
        config (AugmentConfig): chances and ranges.
        sample_rate (int, optional): Hz of the audio. (Default: ``16000``)
        generator (torch.Generator or None, optional): source of randomness; ``None`` uses
            torch's global generator. (Default: ``None``)
        references (bool, optional): also return each utterance's reference: the same voice,
            speed, silence, room and channel without the noise, gain, offset and rounding, as a
            padded `(B, N')` of the same lengths (what the consistency loss of
            :class:`~speech_attend.train.module.RecognizerModule` compares with). (Default: ``False``)

    Returns:
        (torch.Tensor, torch.Tensor): zero-padded audio `(B, N')`, finite and within ``[-1, 1]``,
        and the new lengths `(B,)` (speed and silence change them); with ``references``, the
        references `(B, N')` last.
    """
    if waveforms.dim() != 2 or lengths.dim() != 1 or lengths.numel() != waveforms.size(0):
        raise ValueError(f"expected waveforms (B, N) and lengths (B,), got {tuple(waveforms.shape)} and {tuple(lengths.shape)}")
    clean = [waveforms[i, : int(n)].float() for i, n in enumerate(lengths)]
    config.check(sample_rate)
    out, kept = zip(*[_augment_one(wave, clean, i, config, sample_rate, generator) for i, wave in enumerate(clean)])
    new_lengths = torch.tensor([w.numel() for w in out], dtype=torch.long)
    padded = torch.nn.utils.rnn.pad_sequence(list(out), batch_first=True)  # (B, N')
    if references:
        return padded, new_lengths, torch.nn.utils.rnn.pad_sequence(list(kept), batch_first=True)
    return padded, new_lengths


class AugmentedCollate:
    """A collate function followed by :func:`augment_batch` (for the training loader only).

    Args:
        collate (Collate): makes a batch with ``waveforms``, ``lengths`` and ``batch_size``
            (:class:`speech_attend.data.dataset.Collate`); its ``with_texts`` gives an utterance
            replaced by a sound without speech the empty transcript, and its ids just ``<eos>``.
        config (AugmentConfig): chances and ranges.
        sample_rate (int): Hz of the audio.
        step (int, optional): the training step the first batches are for. (Default: ``0``)
        references (bool, optional): give each batch its ``references`` (see :func:`augment_batch`).
            (Default: ``False``)

    :meth:`set_step` follows the training (``config.start_step`` and ``ramp_steps``); the
    strength lives in shared memory, so loader processes see it too.
    """

    def __init__(self, collate: Callable, config: AugmentConfig, sample_rate: int, step: int = 0, references: bool = False):
        config.check(sample_rate)
        self.collate, self.config, self.sample_rate, self.references = collate, config, sample_rate, references
        self._strength = multiprocessing.RawValue("d", config.strength(step))

    @property
    def strength(self) -> float:
        return self._strength.value

    def set_step(self, step: int) -> None:
        self._strength.value = self.config.strength(step)

    def __call__(self, items):
        batch = self.collate(items)
        strength = self.strength
        if not batch.batch_size or strength <= 0:
            return batch._replace(references=batch.waveforms) if self.references else batch  # nothing added yet
        config = self.config if strength >= 1 else self.config.scaled(strength)
        if config.non_speech_prob > 0:
            texts, waveforms = list(batch.texts), batch.waveforms.clone()
            for i in _without_speech(waveforms, batch.lengths, config, self.sample_rate, None):
                texts[i] = ""
            batch = self.collate.with_texts(batch._replace(waveforms=waveforms), texts)
        if self.references:
            waveforms, lengths, references = augment_batch(batch.waveforms, batch.lengths, config, self.sample_rate,
                                                           references=True)
            return batch._replace(waveforms=waveforms, lengths=lengths, references=references)
        waveforms, lengths = augment_batch(batch.waveforms, batch.lengths, config, self.sample_rate)
        return batch._replace(waveforms=waveforms, lengths=lengths)
