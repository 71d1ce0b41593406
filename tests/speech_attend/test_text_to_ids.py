"""Transcripts become the speller's ids in the recognizer's collate (as captions do in the captioner's),
and the LightningModule only uses them: the same loss as when it computed them itself."""

import math
from dataclasses import replace as replace_config

import torch

from shared import Vocabulary
from speech_attend.data.augment import AugmentConfig, AugmentedCollate
from speech_attend.data.dataset import Collate, collate, speller_targets
from speech_attend.model.features import FeatureConfig
from speech_attend.train.module import RecognizerModule
from tests.helpers import TINY_LAS, TINY_LAS_CHARS

SR = 16000


def _old_targets(texts: list[str], vocabulary: Vocabulary):
    """What ``RecognizerModule._targets`` computed before the ids moved into the collate."""
    ids = [torch.tensor(vocabulary.encode(list(text)), dtype=torch.long) for text in texts]
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    pad, sos, eos = vocabulary.pad_id, vocabulary.sos_id, vocabulary.eos_id
    inputs = torch.full((len(ids), int(lengths.max()) + 1), pad, dtype=torch.long)
    outputs = torch.full_like(inputs, pad)
    for i, x in enumerate(ids):
        inputs[i, 0], inputs[i, 1 : len(x) + 1] = sos, x
        outputs[i, : len(x)], outputs[i, len(x)] = x, eos
    return inputs, outputs, lengths


def _items(texts: list[str]) -> list[tuple[torch.Tensor, str, str]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6000 - 1500 * i, generator=g) * 0.1, text, f"u{i}") for i, text in enumerate(texts)]


def test_collate_with_a_vocabulary_gives_speller_inputs_outputs_and_label_lengths():
    vocabulary = Vocabulary(TINY_LAS_CHARS)
    batch = Collate(vocabulary)(_items(["abc ab", "ca", "b", "x"]))  # "x" is not in the vocabulary: <unk>
    sos, eos, unk = vocabulary.sos_id, vocabulary.eos_id, vocabulary.unk_id
    a, b, c = (vocabulary.stoi[ch] for ch in "abc")
    assert batch.texts == ["abc ab", "ca", "b", "x"]  # kept for the metrics
    assert batch.label_lengths.tolist() == [6, 2, 1, 1]
    assert batch.inputs.shape == batch.outputs.shape == (4, 7)
    assert batch.inputs[1].tolist() == [sos, c, a, 0, 0, 0, 0]
    assert batch.outputs[1].tolist() == [c, a, eos, 0, 0, 0, 0]
    assert batch.outputs[3].tolist()[:2] == [unk, eos]
    for got, old in zip((batch.inputs, batch.outputs, batch.label_lengths), _old_targets(batch.texts, vocabulary)):
        assert torch.equal(got, old)


def test_collate_without_a_vocabulary_gives_texts_and_no_ids():
    batch = collate(_items(["abc", "b"]))
    assert batch.texts == ["abc", "b"] and batch.inputs is None and batch.outputs is None and batch.label_lengths is None


def test_empty_transcript_is_just_eos():
    vocabulary = Vocabulary(TINY_LAS_CHARS)
    inputs, outputs, lengths = speller_targets(["", "ab"], vocabulary)
    assert lengths.tolist() == [0, 2]
    assert inputs[0].tolist() == [vocabulary.sos_id, 0, 0] and outputs[0].tolist() == [vocabulary.eos_id, 0, 0]


def test_ids_follow_the_texts_that_training_conditions_empty():
    vocabulary = Vocabulary(TINY_LAS_CHARS)
    texts = [("abc " * 5)[: 3 + i % 11] for i in range(64)]
    plain = AugmentConfig(
        speed_prob=0, silence_prob=0, reverb_prob=0, noise_prob=0, telephone_prob=0, low_rate_prob=0, gain_prob=0, dc_prob=0
    )
    torch.manual_seed(0)
    augmented = AugmentedCollate(Collate(vocabulary), replace_config(plain, non_speech_prob=0.25), SR)
    batch = augmented([(torch.randn(4000) * 0.1, text, f"u{i}") for i, text in enumerate(texts)])
    emptied = [i for i, text in enumerate(batch.texts) if text == ""]
    assert emptied and all(batch.texts[i] == texts[i] for i in range(64) if i not in emptied)
    for i in emptied:
        assert int(batch.label_lengths[i]) == 0
        assert batch.outputs[i, 0] == vocabulary.eos_id and batch.inputs[i, 0] == vocabulary.sos_id
        assert (batch.outputs[i, 1:] == vocabulary.pad_id).all() and (batch.inputs[i, 1:] == vocabulary.pad_id).all()
    for got, old in zip((batch.inputs, batch.outputs, batch.label_lengths), _old_targets(batch.texts, vocabulary)):
        assert torch.equal(got, old)  # as if the module had encoded the final texts


def test_loss_of_a_batch_is_the_same_as_when_the_module_made_the_ids():
    torch.manual_seed(0)
    module = RecognizerModule(
        las=TINY_LAS,
        features=FeatureConfig(freq_masks=0, time_masks=0),
        vocabulary=TINY_LAS_CHARS,
        ctc_weight=0.3,
        guided_attention=0.5,
    )
    module.train()
    batch = Collate(Vocabulary(TINY_LAS_CHARS))(_items(["abc ab", "ca", "", "b"]))
    old = batch._replace(**dict(zip(("inputs", "outputs", "label_lengths"), _old_targets(batch.texts, module.vocabulary))))
    losses = []
    for which in (batch, old):
        torch.manual_seed(3)  # the same dropout and scheduled-sampling draws
        losses.append(module._loss(which, per_item=True))
    for name in ("loss", "attention_loss", "ctc_loss", "guided_attention_loss", "item_loss"):
        assert torch.equal(losses[0][name], losses[1][name]), name
    assert math.isfinite(losses[0]["loss"].item())
