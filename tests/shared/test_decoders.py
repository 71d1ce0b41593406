"""Both decoders' protocol (start, step, forward, score) on the one shared LSTM step, and the key
maps that load weights saved before it."""

import pytest
import torch

from shared.io.model_files import load_model_files
from shared.lstm import LSTMLayer
from show_attend.model.decoder import Decoder, DecoderConfig
from speech_attend.infer.transcribe import SHIPPED_MODEL
from speech_attend.model.las import build_recognizer
from speech_attend.model.speller import Speller, SpellerConfig

SOS = 1


def _speller(layers: int = 2) -> Speller:
    torch.manual_seed(0)
    config = SpellerConfig(hidden=16, layers=layers, embedding_dim=8, attention="location", attention_dim=10, location_kernel=5)
    return Speller(20, 12, config).eval()


def _decoder(attention: str = "soft") -> Decoder:
    torch.manual_seed(0)
    return Decoder(DecoderConfig(embed_dim=12, attention_dim=10, hidden_dim=16, dropout=0.0, attention=attention), 30, 8).eval()


def _stepped(step, state, memory, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities `(B, T, V)` and attention `(B, T, L)` of ``tokens[:, :-1]`` fed one step at a time."""
    log_probs, alphas = [], []
    for t in range(tokens.size(1) - 1):
        step_log_probs, state, alpha = step(tokens[:, t], state, memory)
        log_probs.append(step_log_probs)
        alphas.append(alpha)
    return torch.stack(log_probs, 1), torch.stack(alphas, 1)


def _sequences(batch: int, length: int, vocab: int) -> torch.Tensor:
    tokens = torch.randint(4, vocab, (batch, length + 1))
    tokens[:, 0] = SOS
    return tokens


# ----------------------------------------------------------------------------- the shared LSTM step


def test_the_shared_lstm_step_is_torchs_lstm_cell():
    torch.manual_seed(0)
    cell, layer = torch.nn.LSTMCell(5, 7), LSTMLayer(5, 7)
    with torch.no_grad():
        layer.weight.copy_(torch.cat([cell.weight_ih, cell.weight_hh], 1))
        layer.bias.copy_(cell.bias_ih + cell.bias_hh)
    x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
    for got, want in zip(layer(x, h, c), cell(x, (h, c))):
        torch.testing.assert_close(got, want)


def test_gates_computed_ahead_add_to_the_layers_own():
    torch.manual_seed(0)
    layer, ahead = LSTMLayer(5, 7), torch.randn(3, 28)
    x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
    without_bias = LSTMLayer(5, 7, bias=False)
    with torch.no_grad():
        without_bias.weight.copy_(layer.weight)
    for got, want in zip(layer(x, h, c, ahead), without_bias(x, h, c, ahead + layer.bias)):
        torch.testing.assert_close(got, want)


# ----------------------------------------------------------------------------- the protocol


def test_score_gives_the_log_probabilities_the_steps_give():
    speller, decoder = _speller(), _decoder()
    states, lengths = torch.randn(3, 11, 12), torch.tensor([11, 9, 6])
    speech_tokens, caption_tokens, features = _sequences(3, 7, 20), _sequences(3, 6, 30), torch.randn(3, 9, 8)
    with torch.no_grad():
        for scored, (step_log_probs, step_alphas), tokens in (
            (
                speller.score(states, lengths, speech_tokens),
                _stepped(speller.step, *reversed(speller.start(states, lengths)), speech_tokens),
                speech_tokens,
            ),
            (
                decoder.score(features, caption_tokens),
                _stepped(decoder.step, *reversed(decoder.start(features)), caption_tokens),
                caption_tokens,
            ),
        ):
            log_probs, alphas = scored[0], scored[1]
            expected = step_log_probs.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (B, T)
            torch.testing.assert_close(log_probs, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(alphas, step_alphas, rtol=1e-5, atol=1e-6)


def test_score_is_zero_past_each_sequences_length_and_unchanged_before_it():
    speller, decoder = _speller(), _decoder()
    states, encoder_lengths, features = torch.randn(3, 11, 12), torch.tensor([11, 9, 6]), torch.randn(3, 9, 8)
    speech_tokens, caption_tokens = _sequences(3, 7, 20), _sequences(3, 7, 30)
    lengths = torch.tensor([5, 7, 2])
    real = torch.arange(7)[None, :] < lengths[:, None]
    with torch.no_grad():
        for full, cut in (
            (
                speller.score(states, encoder_lengths, speech_tokens),
                speller.score(states, encoder_lengths, speech_tokens, lengths),
            ),
            (decoder.score(features, caption_tokens), decoder.score(features, caption_tokens, lengths)),
        ):
            assert (cut[0][~real] == 0).all() and (cut[1][~real] == 0).all()
            torch.testing.assert_close(cut[0][real], full[0][real], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(cut[1][real], full[1][real], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lengths", [None, torch.tensor([6, 4, 2])])
def test_forward_returns_batch_time_vocab_logits(lengths):
    speller, decoder = _speller(), _decoder()
    with torch.no_grad():
        logits, alignments = speller(torch.randn(3, 11, 12), torch.tensor([11, 9, 6]), torch.randint(4, 20, (3, 6)))
        out = decoder(torch.randn(3, 9, 8), torch.randint(4, 30, (3, 6)), lengths)
    assert logits.shape == (3, 6, 20) and alignments.shape == (3, 6, 11)
    assert out.logits.shape == (3, 6, 30) and out.alphas.shape == (3, 6, 9)


def test_the_captioners_forward_and_score_agree_at_the_real_steps_of_unsorted_captions():
    decoder = _decoder()
    features, tokens, lengths = torch.randn(4, 9, 8), _sequences(4, 6, 30), torch.tensor([2, 6, 4, 6])  # not longest first
    real = torch.arange(6)[None, :] < lengths[:, None]
    with torch.no_grad():
        logits = decoder(features, tokens[:, :-1], lengths).logits
        scored = decoder.score(features, tokens, lengths).log_probs
        alone = torch.stack([decoder.score(features[b : b + 1], tokens[b : b + 1]).log_probs[0] for b in range(4)])
    from_logits = logits.log_softmax(-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(scored[real], from_logits[real], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scored[real], alone[real], rtol=1e-5, atol=1e-5)  # each caption as if scored alone


# ----------------------------------------------------------------------------- weights saved before the shared step


def _as_lstm_cells(speller: Speller) -> dict:
    """The speller's weights in the layout of its nn.LSTMCell days (the biases split unevenly, as trained ones are)."""
    state = {k: v.clone() for k, v in speller.state_dict().items() if not k.startswith(("embed_to_gates.", "lstm."))}
    hidden = speller.hidden
    for k, layer in enumerate(speller.lstm):
        weight_ih, weight_hh = layer.weight[:, :-hidden], layer.weight[:, -hidden:]
        bias = speller.embed_to_gates.bias if k == 0 else layer.bias
        if k == 0:
            weight_ih = torch.cat([speller.embed_to_gates.weight, weight_ih], 1)
        state.update(
            {
                f"cells.{k}.weight_ih": weight_ih.clone(),
                f"cells.{k}.weight_hh": weight_hh.clone(),
                f"cells.{k}.bias_ih": bias - 0.25,
                f"cells.{k}.bias_hh": torch.full_like(bias, 0.25),
            }
        )
    return state


def test_a_speller_saved_with_lstm_cells_loads_and_spells_the_same():
    saved = _speller()
    loaded = _speller()
    torch.nn.init.zeros_(loaded.lstm[1].weight)  # so the load must put every weight in place
    loaded.load_state_dict(_as_lstm_cells(saved))  # strict: no key left over or missing
    states, lengths, tokens = torch.randn(2, 11, 12), torch.tensor([11, 7]), _sequences(2, 5, 20)
    with torch.no_grad():
        torch.testing.assert_close(loaded.score(states, lengths, tokens), saved.score(states, lengths, tokens))


def test_the_shipped_recognizer_saved_with_lstm_cells_loads_into_the_shared_step():
    # The shipped weights written back in the nn.LSTMCell layout that models exported before the
    # shared step have (cells.0.weight_ih = [character | context] columns, its two biases apart).
    files = load_model_files(SHIPPED_MODEL, "speech-attend")
    new = files.state_dict
    assert "speller.embed_to_gates.weight" in new and not any(".cells." in key for key in new)
    context = new["speller.lstm.0.weight"].size(1) - new["speller.lstm.0.weight"].size(0) // 4
    old = {key: value for key, value in new.items() if not key.startswith(("speller.embed_to_gates.", "speller.lstm.0."))}
    old["speller.cells.0.weight_ih"] = torch.cat(
        [new["speller.embed_to_gates.weight"], new["speller.lstm.0.weight"][:, :context]], 1
    )
    old["speller.cells.0.weight_hh"] = new["speller.lstm.0.weight"][:, context:]
    old["speller.cells.0.bias_ih"] = new["speller.embed_to_gates.bias"] / 2
    old["speller.cells.0.bias_hh"] = new["speller.embed_to_gates.bias"] / 2
    model = build_recognizer(files.hyper_parameters)
    model.load_state_dict(old)  # strict: every old key mapped, none missing
    for name, value in model.state_dict().items():
        torch.testing.assert_close(
            value, new[name].to(value.dtype), rtol=0, atol=1e-7, msg=name
        )  # a half export loads as float32


def test_a_captioner_decoder_saved_with_split_gate_weights_loads_and_writes_the_same():
    saved = _decoder()
    state = {k: v.clone() for k, v in saved.state_dict().items() if k != "lstm.weight"}
    d = saved.feature_dim
    state["context_to_gates.weight"], state["hidden_to_gates.weight"] = (
        saved.lstm.weight[:, :d].clone(),
        saved.lstm.weight[:, d:].clone(),
    )
    loaded = _decoder()
    torch.nn.init.zeros_(loaded.lstm.weight)
    loaded.load_state_dict(state)
    features, tokens = torch.randn(2, 9, 8), _sequences(2, 5, 30)
    with torch.no_grad():
        assert torch.equal(loaded.score(features, tokens).log_probs, saved.score(features, tokens).log_probs)


def test_a_run_saved_before_the_shared_step_resumes_with_the_same_adam_moments():
    from speech_attend.model.features import FeatureConfig
    from speech_attend.model.migrations import optimizer_states_from_lstm_cells
    from speech_attend.train.module import RecognizerModule
    from tests.helpers import TINY_LAS, TINY_LAS_CHARS

    torch.manual_seed(0)
    module = RecognizerModule(las=TINY_LAS, features=FeatureConfig(freq_masks=0, time_masks=0), vocabulary=TINY_LAS_CHARS)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    sum(p.square().sum() * (i + 1) for i, p in enumerate(module.parameters())).backward()
    optimizer.step()
    today = optimizer.state_dict()
    names = [name for name, _ in module.named_parameters()]
    # The same run as its checkpoint was written before: the speller's LSTMCell parameters at the
    # end of the parameter list, their moments split from today's (both biases share one gradient).
    prefix, hidden = "model.speller.", module.model.speller.hidden
    embedding = module.model.speller.embedding.embedding_dim
    moments = {n: today["state"][i] for i, n in enumerate(names)}
    kept = [n for n in names if not n.startswith((prefix + "embed_to_gates.", prefix + "lstm.0."))]
    gate, joined = moments[prefix + "embed_to_gates.weight"], moments[prefix + "lstm.0.weight"]
    cells = {}
    for field in ("exp_avg", "exp_avg_sq"):
        cells.setdefault(prefix + "cells.0.weight_ih", {})[field] = torch.cat([gate[field], joined[field][:, :-hidden]], 1)
        cells.setdefault(prefix + "cells.0.weight_hh", {})[field] = joined[field][:, -hidden:]
        for bias in ("bias_ih", "bias_hh"):
            cells.setdefault(prefix + f"cells.0.{bias}", {})[field] = moments[prefix + "embed_to_gates.bias"][field]
    saved_names = kept + list(cells)
    state_dict = {n: torch.zeros(1) for n in saved_names}
    state_dict[prefix + "embedding.weight"] = torch.zeros(1, embedding)
    saved = {
        i: {
            "step": today["state"][0]["step"],
            **(cells[n] if n in cells else {f: moments[n][f] for f in ("exp_avg", "exp_avg_sq")}),
        }
        for i, n in enumerate(saved_names)
    }
    checkpoint = {
        "state_dict": state_dict,
        "optimizer_states": [
            {"state": saved, "param_groups": [dict(today["param_groups"][0], params=list(range(len(saved_names))))]}
        ],
    }
    optimizer_states_from_lstm_cells(checkpoint, [name for name, _ in module.named_parameters()])
    restored = checkpoint["optimizer_states"][0]
    assert restored["param_groups"][0]["params"] == list(range(len(names)))
    for i in range(len(names)):
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(restored["state"][i][field], today["state"][i][field]), (names[i], field)
    optimizer.load_state_dict(restored)  # the optimiser takes it
