"""Three ways attention fails, each shown with a reproducible example.

    python -m scripts.demo.failure_modes --captioner CKPT --recognizer CKPT [--data data] [--out outputs/failure_modes]

1. Two near-identical candidates: a scene with two objects of the same size, colour and shape.
   For each word naming them, how the attention's mass falls on the two boxes: split between
   them, or one picked.
2. A longer input than training: a scene of 6 objects for a captioner trained on 1 to 4.
3. A wrong mask: a batch of a short and a long utterance decoded with the padding mask, and
   again with it dropped (every position of the padded batch counted as real): the short
   utterance's attention then spreads into the padding.

Writes ``OUT/failure_modes.json`` and a PNG per example (``identical.png``, ``longer.png``,
``mask_right.png``, ``mask_dropped.png``); the demo page shows them. Everything is seeded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from shared import beam_search
from shared.evaluation.plots import save_alignment, save_caption_grid
from show_attend.builtin.shapes import generate_scene
from speech_attend.evaluate.metrics import char_error_rate

ROOT = Path(__file__).resolve().parents[2]


def _scene(rng: np.random.Generator, accept) -> object:
    while True:
        scene = generate_scene(rng, image_size=128, max_objects=6)
        if accept(scene):
            return scene


def _mass_in_box(weights: torch.Tensor, box: tuple, size: int) -> float:
    """Attention mass `(gh, gw)` on the cells whose centre lies in ``box`` (pixels)."""
    gh, gw = weights.shape
    rows = (torch.arange(gh) + 0.5) * size / gh
    cols = (torch.arange(gw) + 0.5) * size / gw
    inside = ((rows >= box[1]) & (rows < box[3]))[:, None] & ((cols >= box[0]) & (cols < box[2]))[None, :]
    return float(weights[inside].sum())


def _caption(model, scene, out: Path, name: str) -> dict:
    from show_attend.data.images import image_transform

    image = image_transform(model.config.image_size)(scene.image)[None]
    with torch.no_grad():
        hyp = model.search(model.encode(image))[0]
    words = model.vocabulary.decode(hyp.tokens)
    attention = hyp.attention.view(-1, *model.grid)  # (T, gh, gw)
    save_caption_grid(np.asarray(scene.image), words, attention, out / f"{name}.png")
    return {"caption": " ".join(words), "reference": " ".join(scene.captions[0]), "attention": attention, "image": f"{name}.png"}


def identical(model, out: Path, rng) -> dict:
    """Two objects alike in every word: does each word's attention split or pick one?"""
    scene = _scene(rng, lambda s: len(s.objects) == 2 and s.objects[0].words() == s.objects[1].words())
    result = _caption(model, scene, out, "identical")
    first, second = scene.objects
    words = result["caption"].split()
    named = [t for t, w in enumerate(words) if w in first.words()]
    masses = [
        (words[t], _mass_in_box(result["attention"][t], first.box, 128), _mass_in_box(result["attention"][t], second.box, 128))
        for t in named
    ]
    return {
        "caption": result["caption"],
        "reference": result["reference"],
        "image": result["image"],
        "words": [{"word": w, "on_first": round(a, 3), "on_second": round(b, 3)} for w, a, b in masses],
    }


def longer(model, out: Path, rng) -> dict:
    """Six objects, for a model trained on one to four."""
    scene = _scene(rng, lambda s: len(s.objects) == 6)
    result = _caption(model, scene, out, "longer")
    return {key: result[key] for key in ("caption", "reference", "image")} | {"objects": 6}


def wrong_mask(path: Path, data: Path, out: Path) -> dict:
    """A short utterance padded to a long one's length, decoded with and without its mask."""
    from speech_attend.data.audio import load_audio
    from speech_attend.data.dataset import pad_waves
    from speech_attend.data.readers import read_librispeech
    from speech_attend.data.text import normalize_text
    from speech_attend.infer.transcribe import load_recognizer
    from speech_attend.model.las import native_cpu_kernels

    model = load_recognizer(path)
    vocabulary, decoding = model.vocabulary, model.decoding
    test = sorted(read_librispeech(data, subsets=["test"]), key=lambda u: u.utt_id)
    waves = [load_audio(u.audio_path) for u in test]
    short = min(range(len(test)), key=lambda i: waves[i].numel())
    long = max(range(len(test)), key=lambda i: waves[i].numel())
    waveforms, lengths = pad_waves([waves[short], waves[long]])
    result = {
        "reference": normalize_text(test[short].text),
        "seconds": round(waves[short].numel() / 16000, 2),
        "padded_to_seconds": round(waves[long].numel() / 16000, 2),
    }
    with torch.no_grad(), native_cpu_kernels():
        states, frames = model.encode(waveforms, lengths)
        for name, mask_lengths in (("mask_right", frames), ("mask_dropped", torch.full_like(frames, states.size(1)))):
            memory, state = model.speller.start(states, mask_lengths)
            max_len = (frames.float() * decoding.max_len_ratio).ceil().long() + 1
            hyp = beam_search(
                model.speller.step,
                state,
                2,
                decoding.beam_size,
                vocabulary.sos_id,
                vocabulary.eos_id,
                max_len,
                length_penalty=decoding.length_penalty,
                memory=memory,
            )[0][0]
            text = "".join(vocabulary.decode(hyp.tokens))
            labels = vocabulary.decode(hyp.tokens, strip_specials=False)
            attention = hyp.attention if hyp.attention is not None else torch.zeros(0, states.size(1))
            beyond = float(attention[:, int(frames[0]) :].sum() / max(1, len(labels)))
            if labels:
                save_alignment(
                    attention,
                    out / f"{name}.png",
                    labels,
                    model.frame_seconds,
                    f"{name.replace('_', ' ')}: {text[:60]} (real frames end at {int(frames[0]) * model.frame_seconds:.2f} s)",
                )
            result[name] = {
                "text": text,
                "cer": char_error_rate([result["reference"]], [text]),
                "attention_on_padding": round(beyond, 3),
                "image": f"{name}.png" if labels else None,
            }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captioner", required=True, help="a show-attend checkpoint or exported folder (trained on shapes)")
    parser.add_argument("--recognizer", required=True, help="a speech-attend checkpoint or exported folder")
    parser.add_argument(
        "--data", type=Path, default=ROOT / "data" / "synth", help="a spoken corpus with a test split (default data/synth)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "failure_modes")
    args = parser.parse_args(argv)
    from show_attend.infer.caption import load_captioner

    args.out.mkdir(parents=True, exist_ok=True)
    captioner = load_captioner(args.captioner).eval()
    rng = np.random.default_rng(7)
    results = {
        "identical": identical(captioner, args.out, rng),
        "longer": longer(captioner, args.out, rng),
        "wrong_mask": wrong_mask(args.recognizer, args.data, args.out),
    }
    (args.out / "failure_modes.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
