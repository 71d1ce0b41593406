"""REINFORCE helpers for hard attention, and the vocabulary."""

import json

import pytest
import torch

from shared import MovingAverageBaseline, ReinforceConfig, Vocabulary, attention_entropy, reinforce_loss


def test_reinforce_surrogate_gradient_matches_hand_computation():
    config = ReinforceConfig(reinforce_weight=0.1, entropy_weight=0.002)
    theta = torch.tensor([0.2, -0.4, 1.0], requires_grad=True)  # attention logits, one step
    w = torch.tensor(0.7, requires_grad=True)  # a parameter of the word model
    alpha = torch.softmax(theta, -1)
    sampled, baseline = 2, -1.5
    log_likelihood = 3.0 * w - 2.5  # log p(y | s), depends on w only
    loss = reinforce_loss(
        log_likelihood.view(1),
        alpha[sampled].log().view(1, 1),
        attention_entropy(alpha).view(1, 1),
        torch.ones(1, 1, dtype=torch.bool),
        baseline,
        config,
    )
    loss.backward()

    a = alpha.detach()
    advantage = (3.0 * 0.7 - 2.5) - baseline
    grad_log_alpha_s = torch.eye(3)[sampled] - a  # d log alpha_s / d theta
    entropy = -(a * a.log()).sum()
    grad_entropy = -a * (a.log() + entropy)  # d H / d theta
    expected_theta = -(config.reinforce_weight * advantage * grad_log_alpha_s + config.entropy_weight * grad_entropy)
    torch.testing.assert_close(theta.grad, expected_theta)
    torch.testing.assert_close(w.grad, torch.tensor(-3.0))  # only the likelihood term reaches w


def test_reinforce_ignores_padded_steps():
    log_probs = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    entropy = torch.tensor([[0.3, 0.9]], requires_grad=True)
    loss = reinforce_loss(torch.tensor([-2.0]), log_probs, entropy, torch.tensor([[True, False]]), 0.0)
    loss.backward()
    assert log_probs.grad[0, 1] == 0 and entropy.grad[0, 1] == 0
    assert log_probs.grad[0, 0] != 0


def test_moving_average_baseline_follows_b_equals_point9_b_plus_point1_mean():
    baseline = MovingAverageBaseline(decay=0.9)
    first = baseline.update(torch.tensor([-4.0, -2.0]))
    assert first == pytest.approx(-3.0)  # the first batch initialises it
    used = baseline.update(torch.tensor([-1.0]))
    assert used == pytest.approx(-3.0)
    assert float(baseline.value) == pytest.approx(0.9 * -3.0 + 0.1 * -1.0)
    assert "value" in baseline.state_dict()  # saved with the model


def test_vocabulary_build_respects_min_freq_and_orders_by_frequency():
    vocab = Vocabulary.build([["a", "cat", "a"], ["a", "dog", "cat"], ["rare"]], min_freq=2)
    assert vocab.itos == ["<pad>", "<sos>", "<eos>", "<unk>", "a", "cat"]
    assert vocab.encode(["a", "dog"], add_sos=True, add_eos=True) == [1, 4, 3, 2]
    assert vocab.decode([1, 4, 5, 2, 4]) == ["a", "cat"]  # stops at <eos>


def test_vocabulary_round_trips_through_json(tmp_path):
    vocab = Vocabulary.build([list("hello world")])
    path = tmp_path / "vocab.json"
    vocab.save(path)
    assert Vocabulary.load(path) == vocab
    assert json.loads(path.read_text())["tokens"][0] == "l"  # most frequent first


def test_vocabulary_rejects_bad_files(tmp_path):
    bad = tmp_path / "vocab.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="vocab.json"):
        Vocabulary.load(bad)
    with pytest.raises(ValueError, match="unique"):
        Vocabulary(["a", "a"])
