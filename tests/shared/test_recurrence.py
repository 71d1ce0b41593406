"""shared.recurrence: one gradient product for tensors used at every step, same gradients as autograd's."""

import contextlib
import copy
import gc
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import show_attend.model.decoder as decoder_module
import speech_attend.model.speller as speller_module
from shared.attention import soft_read
from shared.recurrence import Recurrence, step_linear, step_read
from show_attend.model.decoder import Decoder, DecoderConfig
from speech_attend.model.speller import Speller, SpellerConfig


def _loop(recurrence: bool, weight, hidden_weight, values, x, steps: int = 6):
    """A small recurrence whose batch shrinks as sequences end, reading ``values`` at every step."""
    h = torch.zeros(x.size(0), hidden_weight.size(0))
    total = 0
    with Recurrence() if recurrence else contextlib.nullcontext():
        for t in range(steps):
            rows = x.size(0) - t // 2
            h, v = h[:rows], values[:rows]
            h = torch.tanh(step_linear(x[:rows] * (t + 1), weight) + step_linear(h, hidden_weight))  # (rows, H)
            alpha = torch.softmax(torch.bmm(v, h[:, :, None]).squeeze(2), -1)  # (rows, L)
            h = h + step_read(alpha, v)
            total = total + h.square().sum()
    return total


def _tensors():
    torch.manual_seed(0)
    return (
        torch.randn(8, 5, requires_grad=True),
        torch.randn(8, 8, requires_grad=True),
        torch.randn(4, 7, 8, requires_grad=True),
        torch.randn(4, 5, requires_grad=True),
    )


def test_step_linear_and_step_read_give_autograds_values_and_gradients_as_the_batch_shrinks():
    plain, deferred = _tensors(), _tensors()
    loss_plain, loss_deferred = _loop(False, *plain), _loop(True, *deferred)
    assert torch.equal(loss_plain, loss_deferred)
    loss_plain.backward()
    loss_deferred.backward()
    for a, b in zip(plain, deferred):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


class _CountProducts(TorchDispatchMode):
    """Counts matrix products whose result has a given shape."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.count = tuple(shape), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (
            func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm, torch.ops.aten.addmm)
            and tuple(out.shape) == self.shape
        ):
            self.count += 1
        return out


@pytest.mark.parametrize("recurrence, products", [(False, 6), (True, 1)])
def test_a_shared_weight_gets_its_gradient_from_one_product_for_all_steps(recurrence, products):
    weight, hidden_weight, values, x = _tensors()
    loss = _loop(recurrence, weight, hidden_weight, values, x)
    with _CountProducts(hidden_weight.shape) as counter:  # (8, 8): only the hidden weight's gradient has this shape
        loss.backward()
    assert counter.count == products


def test_an_input_changed_in_place_after_its_step_is_an_error_not_a_wrong_gradient():
    weight = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(2, 4)
    with Recurrence():
        y = step_linear(x, weight)
    x.add_(1)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()


def test_a_pass_leaves_nothing_alive_after_backward():
    # Each step's input comes from the step before, so it holds the graph of the earlier uses; kept
    # with that graph, it closed a cycle through autograd that leaked every pass of a training run.
    weight = torch.randn(3, 3, requires_grad=True)
    values = torch.randn(2, 4, 3, requires_grad=True)
    with Recurrence():
        hidden = torch.randn(2, 3)
        for _ in range(3):
            hidden = torch.tanh(step_linear(hidden, weight))
            weights = torch.softmax(hidden @ torch.ones(3, 4), -1)
            hidden = hidden + step_read(weights, values)
        probes = [weakref.ref(hidden), weakref.ref(weights)]
    hidden.sum().backward()
    del hidden, weights
    gc.collect()
    assert [probe() for probe in probes] == [None, None]


def test_outside_a_recurrence_or_without_gradients_they_are_the_plain_operations():
    weight, values = torch.randn(3, 4, requires_grad=True), torch.randn(2, 5, 4, requires_grad=True)
    x, alpha = torch.randn(2, 4), torch.softmax(torch.randn(2, 5), -1)
    assert type(step_linear(x, weight).grad_fn).__name__ != "_UseBackward"
    with Recurrence(), torch.no_grad():
        assert step_linear(x, weight).grad_fn is None and step_read(alpha, values).grad_fn is None
    with Recurrence():
        assert type(step_linear(x, weight).grad_fn).__name__ == "_UseBackward"
        torch.testing.assert_close(step_read(alpha, values), soft_read(alpha, values.detach()))


def _gradients(module: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    module.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}


def _assert_same_gradients(monkeypatch, owner, module, loss_fn) -> None:
    deferred = _gradients(module, loss_fn())
    monkeypatch.setattr(owner, "Recurrence", contextlib.nullcontext)  # autograd's own per-step gradients
    plain = _gradients(module, loss_fn())
    assert deferred.keys() == plain.keys()
    for name in plain:
        torch.testing.assert_close(deferred[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_the_captioner_decoder_has_autograds_gradients_with_captions_of_different_lengths(monkeypatch, attention):
    torch.manual_seed(0)
    decoder = Decoder(DecoderConfig(embed_dim=12, attention_dim=10, hidden_dim=16, gate="channel", attention=attention), 30, 8)
    features, inputs = torch.randn(5, 9, 8), torch.randint(4, 30, (5, 7))
    lengths = torch.tensor([7, 7, 5, 3, 2])

    def loss():
        torch.manual_seed(1)  # the same hard-attention samples in both runs
        out = decoder(features, inputs, lengths, sample=attention == "hard")
        return out.logits.square().mean() + out.alphas.square().sum()

    _assert_same_gradients(monkeypatch, decoder_module, decoder, loss)


@pytest.mark.parametrize("sampling", [0.0, 0.5])
def test_the_speller_has_autograds_gradients_with_location_attention_and_scheduled_sampling(monkeypatch, sampling):
    torch.manual_seed(0)
    speller = Speller(
        20, 12, SpellerConfig(hidden=16, layers=2, embedding_dim=8, attention="location", attention_dim=10, location_kernel=5)
    )
    states, lengths = torch.randn(3, 11, 12), torch.tensor([11, 9, 6])
    inputs = torch.randint(4, 20, (3, 8))

    def loss():
        torch.manual_seed(1)
        logits, weights = speller(states, lengths, inputs, sampling_probability=sampling)
        return logits.square().mean() + weights.square().sum()

    _assert_same_gradients(monkeypatch, speller_module, speller, loss)


def test_the_spellers_decoding_step_reads_the_weights_as_they_are_now():
    # No joined copy of the weights is kept between searches: an optimiser step in between (an
    # in-place change) is seen by the next search.
    torch.manual_seed(0)
    speller = Speller(
        20, 12, SpellerConfig(hidden=16, layers=2, embedding_dim=8, attention="location", attention_dim=10, location_kernel=5)
    ).eval()
    memory, state = speller.start(torch.randn(3, 11, 12), torch.tensor([11, 9, 6]))
    tokens = torch.tensor([4, 5, 6])
    with torch.no_grad():
        before, _, _ = speller.step(tokens, state, memory)
        speller.lstm[1].weight.add_(0.5)
        after, _, _ = speller.step(tokens, state, memory)
        fresh = copy.deepcopy(speller)
        expected, _, _ = fresh.step(tokens, state, memory)
    assert not torch.equal(before, after)
    assert torch.equal(after, expected)


def test_the_captioner_decoders_training_pass_and_decoding_steps_give_the_same_words():
    # Training runs only the captions still going at each step; decoding steps run every row.
    # Both must be the same LSTM.
    torch.manual_seed(0)
    decoder = Decoder(DecoderConfig(embed_dim=12, attention_dim=10, hidden_dim=16, dropout=0.0), 30, 8).eval()
    features, inputs = torch.randn(3, 9, 8), torch.randint(4, 30, (3, 6))
    lengths = torch.tensor([6, 4, 2])
    logits = decoder(features, inputs, lengths).logits.log_softmax(-1)  # (B, T, V)
    packed = torch.cat([logits[b, : int(n)] for b, n in enumerate(lengths)])  # the real steps, caption then step
    memory, state = decoder.start(features)
    stepped = []
    with torch.no_grad():
        for t in range(inputs.size(1)):
            log_probs, state, _ = decoder.step(inputs[:, t], state, memory)
            stepped.append(log_probs)
    stepped = torch.stack(stepped, 1)  # (B, T, V)
    expected = torch.cat([stepped[b, : int(n)] for b, n in enumerate(lengths)])
    torch.testing.assert_close(packed.detach(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sampling", [0.5, 1.0])
def test_scheduled_sampling_feeds_the_rows_it_draws_the_previous_steps_prediction(sampling):
    # Predictions go through the output layer only for the drawn rows; the logits returned must be
    # those of a step-by-step decode that reads, in each drawn row, the previous step's argmax.
    torch.manual_seed(0)
    speller = Speller(
        20, 12, SpellerConfig(hidden=16, layers=2, embedding_dim=8, attention="location", attention_dim=10, location_kernel=5)
    ).eval()
    states, lengths = torch.randn(4, 11, 12), torch.tensor([11, 9, 6, 3])
    memory, state = speller.start(states, lengths)
    inputs = torch.randint(4, 20, (4, 9))
    with torch.no_grad():
        torch.manual_seed(1)
        logits, _ = speller(states, lengths, inputs, sampling_probability=sampling)
        torch.manual_seed(1)  # the same draws, in the same order
        tokens, expected, drawn = inputs[:, 0], [], 0
        for i in range(inputs.size(1)):
            if i > 0:
                sampled = torch.rand(4) < sampling
                drawn += int(sampled.sum())
                tokens = torch.where(sampled, expected[-1].argmax(-1), inputs[:, i])
            log_probs, state, _ = speller.step(tokens, state, memory)
            expected.append(log_probs)
    assert drawn > 0 and (sampling == 1.0) == (drawn == 4 * (inputs.size(1) - 1))
    torch.testing.assert_close(logits.log_softmax(-1), torch.stack(expected, 1), rtol=1e-5, atol=1e-5)
