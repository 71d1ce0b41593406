"""Collapse is named: validation measures how varied the outputs are and says when a model writes
the same output for every input or loops, and decoding stops a hypothesis that repeats one token."""

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from shared import Vocabulary, beam_search, greedy_search
from shared.evaluation.collapse import MIN_OUTPUTS, collapse_warning, is_looping, output_collapse
from shared.training.module import AttendModule
from show_attend.model.captioner import Captioner, CaptionerConfig, build_captioner
from show_attend.model.captioner import DecodeConfig as CaptionDecodeConfig
from show_attend.model.decoder import DecoderConfig
from show_attend.model.encoder import EncoderConfig
from speech_attend.model.las import DecodeConfig, build_recognizer

ROOT = Path(__file__).resolve().parents[2]
SOS, EOS, VOCAB = 0, 3, 5

# ------------------------------------------------------------------ the measure


def test_distinct_share_counts_each_different_output_once():
    collapse = output_collapse(["a dog", "a dog", "a cat", "a dog"])
    assert collapse.outputs == 4
    assert collapse.distinct_share == pytest.approx(2 / 4)
    assert collapse.most_common == "a dog" and collapse.most_common_share == pytest.approx(3 / 4)
    assert output_collapse(["one", "two", "three"]).distinct_share == 1.0


def test_an_output_loops_when_one_word_comes_four_times_in_a_row_or_is_most_of_a_long_output():
    assert is_looping("big big big big")
    assert is_looping("a man big big big big big riding")
    assert is_looping("the dog the cat the man the bird the")  # 9 words, "the" 5 of them, never twice in a row
    assert not is_looping("big big big")  # three in a row is still real text ("very very very")
    assert not is_looping("the the the dog")
    assert not is_looping("a man riding a wave on top of a surfboard")  # "a" 3 of 10
    assert not is_looping("the cat the")  # "the" is most of it, but it is short
    assert not is_looping("")


def test_looping_share_is_the_share_of_outputs_that_loop():
    collapse = output_collapse(["big big big big big", "a red circle", "small small small small", "a blue square"])
    assert collapse.looping_share == pytest.approx(2 / 4)
    assert collapse.looping_example == "big big big big big"
    assert output_collapse(["a red circle"]).looping_share == 0.0


def test_measuring_no_outputs_is_refused():
    with pytest.raises(ValueError, match="at least one output"):
        output_collapse([])


def test_the_warning_names_the_repeated_output_and_says_what_to_do():
    message = collapse_warning(
        output_collapse(["big big big big"] * 291 + [f"caption {i}" for i in range(9)]), "validation", "captions"
    )
    assert message == (
        "validation: 97% of the 300 captions are the same one ('big big big ...'): "
        "the model has collapsed; train longer or lower the learning rate"
    )
    message = collapse_warning(output_collapse([""] * 20), "test", "transcripts")
    assert message.startswith("test: 100% of the 20 transcripts are the same one ((empty))")


def test_the_warning_names_outputs_that_loop_even_when_they_differ():
    outputs = [f"word{i} " + f"w{i} " * 6 for i in range(12)]
    message = collapse_warning(output_collapse(outputs), "validation", "captions")
    assert message.startswith("validation: 100% of the 12 captions repeat one word over and over (such as 'word0 w0 w0 ...')")
    assert "the model loops" in message


def test_varied_outputs_and_few_outputs_give_no_warning():
    assert collapse_warning(output_collapse([f"a dog number {i}" for i in range(50)]), "validation") is None
    half = ["a dog"] * 10 + [f"a cat {i}" for i in range(10)]  # the same output for half, not most
    assert collapse_warning(output_collapse(half), "validation") is None
    assert collapse_warning(output_collapse(["a dog"] * (MIN_OUTPUTS - 1)), "validation") is None


# ------------------------------------------------------------------ the evaluation loop


class _FixedOutputs(AttendModule):
    """A module whose validation "decodes" item ``i`` as ``captions[i]``: the shared loop alone."""

    app = "show-attend"
    output_field, output_noun = "caption", "captions"

    def __init__(self, captions: list[str]):
        super().__init__()
        self.captions = captions
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight * batch.float()).sum()

    def validation_step(self, batch, batch_idx):
        records = [{"key": int(i), "loss": 0.0, "caption": self.captions[int(i)]} for i in batch]
        self.add_evaluation("val", records, self.weight.sum())

    def evaluation_metrics(self, records):
        return {}

    def output_line(self, record):
        return {"caption": record["caption"]}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(captions: list[str], tmp_path: Path, epochs: int = 3) -> tuple[pl.Trainer, list[str]]:
    """Fit for ``epochs`` (one validation each, after a sanity check of the whole split); the
    collapse warnings given."""
    module = _FixedOutputs(captions)
    loader = DataLoader(torch.arange(len(captions)), batch_size=8)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=-1,
        default_root_dir=tmp_path,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning given, not only the first of each text
        trainer.fit(module, loader, loader)
    return trainer, [str(w.message) for w in caught if "validation:" in str(w.message)]


def test_validation_warns_once_per_run_when_every_caption_is_the_same(tmp_path):
    trainer, warned = _fit(["big big big big"] * 30, tmp_path)
    assert warned == [
        "validation: 100% of the 30 captions are the same one ('big big big ...'): "
        "the model has collapsed; train longer or lower the learning rate"
    ]  # 3 validations, one warning
    assert trainer.callback_metrics["val/distinct_outputs"] == pytest.approx(1 / 30)
    assert trainer.callback_metrics["val/looping_outputs"] == pytest.approx(1.0)


def test_validation_of_varied_captions_logs_the_shares_and_does_not_warn(tmp_path):
    trainer, warned = _fit([f"a red circle number {i}" for i in range(30)], tmp_path)
    assert warned == []
    assert trainer.callback_metrics["val/distinct_outputs"] == pytest.approx(1.0)
    assert trainer.callback_metrics["val/looping_outputs"] == pytest.approx(0.0)


def test_the_sanity_check_of_an_untrained_model_gives_no_warning(tmp_path):
    _, warned = _fit(["big big big big"] * 30, tmp_path, epochs=0)  # the sanity check runs, no epoch
    assert warned == []


# ------------------------------------------------------------------ the repeat stop in decoding


def _looping_step(tokens, state):
    """A model that prefers token 1 forever; ``<eos>`` is unlikely but possible."""
    log_probs = torch.full((tokens.numel(), VOCAB), -8.0)
    log_probs[:, 1] = -0.01
    return log_probs.log_softmax(-1), state, None


def _cycling_step(tokens, state):
    """A model that writes 1 2 1 2 1 2 and then ends: no token twice in a row."""
    (step,) = state
    log_probs = torch.full((tokens.numel(), VOCAB), -8.0)
    rows = torch.arange(tokens.numel())
    log_probs[rows, torch.where(step >= 6, EOS, 1 + step % 2)] = -0.01
    return log_probs.log_softmax(-1), (step + 1,), None


@pytest.mark.parametrize("beam_size", [1, 3])
def test_beam_search_ends_a_hypothesis_that_repeats_one_token_max_repeats_times(beam_size):
    state = (torch.zeros(2),)
    looping = beam_search(_looping_step, state, 2, beam_size, SOS, EOS, max_len=40)
    assert [len(h[0].tokens) for h in looping] == [40, 40]  # without the stop: fills max_len
    stopped = beam_search(_looping_step, state, 2, beam_size, SOS, EOS, max_len=40, max_repeats=4)
    for hyps in stopped:
        assert hyps[0].tokens == [1, 1, 1, 1] and hyps[0].finished
    greedy = greedy_search(_looping_step, state, 2, SOS, EOS, max_len=40, max_repeats=4)
    assert greedy == [[1, 1, 1, 1]] * 2


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_repeat_stop_leaves_an_output_that_does_not_repeat_unchanged(beam_size):
    state = (torch.zeros(3, dtype=torch.long),)
    plain = beam_search(_cycling_step, state, 3, beam_size, SOS, EOS, max_len=20)
    stopped = beam_search(_cycling_step, state, 3, beam_size, SOS, EOS, max_len=20, max_repeats=2)  # the tightest stop
    assert [hyps[0].tokens for hyps in stopped] == [hyps[0].tokens for hyps in plain] == [[1, 2, 1, 2, 1, 2]] * 3
    assert [hyps[0].score for hyps in stopped] == [hyps[0].score for hyps in plain]


def test_max_repeats_below_two_is_refused():
    with pytest.raises(ValueError, match="max_repeats must be None or >= 2"):
        beam_search(_looping_step, (torch.zeros(1),), 1, 2, SOS, EOS, max_len=5, max_repeats=1)
    with pytest.raises(ValueError, match="decoding.max_repeats"):
        DecodeConfig(max_repeats=1)
    with pytest.raises(ValueError, match="decoding.max_repeats"):
        CaptionDecodeConfig(max_repeats=0)


def _tiny_captioner(words: list[str], **decoding) -> Captioner:
    encoder = EncoderConfig(backbone="small", grid_size=4, small_channels=16, channels_last=False)
    decoder = DecoderConfig(embed_dim=16, attention_dim=16, hidden_dim=16)
    config = CaptionerConfig(encoder, decoder, image_size=32)
    return Captioner(config, Vocabulary(words), CaptionDecodeConfig(**decoding)).eval()


def _favour(step, token: int):
    """``step`` with every output's probability moved onto ``token`` (``<eos>`` unlikely)."""

    def looping(tokens, state, memory):
        log_probs, state, attention = step(tokens, state, memory)
        biased = torch.full_like(log_probs, -10.0)
        biased[:, token] = 0.0
        return biased.log_softmax(-1), state, attention

    return looping


def test_the_captioner_ends_a_caption_that_repeats_one_word():
    torch.manual_seed(0)
    model = _tiny_captioner(["a", "big", "red", "circle"], max_length=40)
    big = model.vocabulary.encode(["big"])[0]
    model.decoder.step = _favour(model.decoder.step, big)
    # Every caption pays for one <eos>, so the empty one ties with "big big big big" on total
    # log-probability; ranked per word, the loop's end wins, as a loop ranks in a real search.
    model.decoding = replace(model.decoding, length_penalty=1.0)
    features = torch.randn(2, 16, model.encoder.feature_dim)
    captions = [model.vocabulary.decode(h.tokens) for h in model.search(features)]
    assert captions == [["big"] * model.decoding.max_repeats] * 2  # "big big big big", not 40 words
    model.decoding = replace(model.decoding, max_repeats=None)
    assert [len(h.tokens) for h in model.search(features)] == [40, 40]


def test_the_recognizer_ends_a_transcript_that_repeats_one_character():
    hparams = {
        "vocabulary": list("abcdefgh "),
        "las": {
            "listener_hidden": 8,
            "pyramid_layers": 2,
            "speller_hidden": 16,
            "embedding_dim": 8,
            "attention_dim": 8,
            "location_filters": 2,
            "location_kernel": 5,
            "ctc_upsample": 2,
        },
    }
    torch.manual_seed(0)
    model = build_recognizer(hparams)
    vocabulary, decoding = model.vocabulary, model.decoding
    model.eval()
    a = vocabulary.encode(["a"])[0]
    model.speller.step = _favour(model.speller.step, a)
    waveforms = torch.randn(2, 16000) * 0.1
    lengths = torch.tensor([16000, 12000])
    decoding = replace(decoding, ctc_weight=0.0)  # the beam's own best: an untrained CTC head would rank at random
    hyps, _ = model.decode(waveforms, lengths, decoding)
    assert ["".join(vocabulary.decode(h.tokens)) for h in hyps] == ["a" * decoding.max_repeats] * 2


def test_configs_saved_before_max_repeats_load_with_the_stop_on():
    saved = json.loads((ROOT / "models" / "speech_attend" / "config.json").read_text())["hyper_parameters"]
    decoding = {k: v for k, v in saved["decoding"].items() if k != "max_repeats"}
    saved = {**saved, "decoding": decoding}  # as a recognizer saved before the field
    decoding = build_recognizer(saved).decoding
    assert decoding.max_repeats == DecodeConfig().max_repeats == 6
    small = {"encoder": {"backbone": "small", "grid_size": 2, "small_channels": 8}, "decoder": {"hidden_dim": 8}}
    old_caption_config = {"vocabulary": ["a"], **small, "beam_size": 5, "max_decode_length": 50}  # beside the network
    assert build_captioner(old_caption_config).decoding.max_repeats == 4
    off = build_recognizer({**saved, "decoding": {**saved["decoding"], "max_repeats": None}}).decoding
    assert off.max_repeats is None  # a saved None keeps the stop off
