"""The attention core: masks, scores, soft/hard reads, multi-head attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from shared import (
    AdditiveScore,
    Attention,
    DotScore,
    GeneralScore,
    LocationAwareScore,
    MultiHeadAttention,
    ScaledDotScore,
    build_score,
    causal_mask,
    combine_masks,
    hard_read,
    lengths_to_mask,
    masked_softmax,
    soft_read,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_lengths_to_mask_marks_positions_below_length():
    mask = lengths_to_mask(torch.tensor([3, 1, 0]), max_len=4)
    assert mask.tolist() == [[True, True, True, False], [True, False, False, False], [False] * 4]


def test_causal_mask_lets_row_t_read_only_up_to_t():
    mask = causal_mask(4)
    for t in range(4):
        assert mask[t].tolist() == [s <= t for s in range(4)]
    # Longer key side: the extra leading keys are readable by all queries (a cache prefix).
    assert causal_mask(2, 3).tolist() == [[True, True, False], [True, True, True]]


def test_combine_masks_is_logical_and():
    padding = lengths_to_mask(torch.tensor([2, 3]), 3)[:, None, :]  # (B, 1, S)
    combined = combine_masks(padding, causal_mask(3), None)
    assert combined.shape == (2, 3, 3)
    assert combined[0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine_masks(None, None) is None


def test_weights_are_nonnegative_and_rows_sum_to_one():
    weights = masked_softmax(torch.randn(5, 7) * 10)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))


def test_masked_positions_get_exactly_zero_and_others_renormalise():
    scores = torch.randn(4, 6)
    mask = lengths_to_mask(torch.tensor([6, 4, 2, 1]), 6)
    weights = masked_softmax(scores, mask)
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    torch.testing.assert_close(weights[1, :4], torch.softmax(scores[1, :4], -1))


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    scores = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[True] * 5, [False] * 5])
    weights = masked_softmax(scores, mask)
    assert not torch.isnan(weights).any()
    assert (weights[1] == 0).all()
    (weights * torch.randn(2, 5)).sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_fully_masked_row_in_half_precision_gives_no_nan():
    weights = masked_softmax(torch.randn(2, 5).bfloat16(), torch.zeros(2, 5, dtype=torch.bool))
    assert not torch.isnan(weights.float()).any() and (weights == 0).all()


def test_adding_a_constant_to_scores_leaves_weights_unchanged():
    scores = torch.randn(3, 8)
    mask = lengths_to_mask(torch.tensor([8, 5, 3]), 8)
    torch.testing.assert_close(masked_softmax(scores, mask), masked_softmax(scores + 123.0, mask))


def test_scaled_dot_product_equals_torch_sdpa():
    q, k, v = torch.randn(2, 3, 16), torch.randn(2, 7, 16), torch.randn(2, 7, 10)
    mask = lengths_to_mask(torch.tensor([7, 4]), 7)
    attention = Attention(ScaledDotScore())
    context, _ = attention(q, attention.precompute(k, v, mask))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, :])
    torch.testing.assert_close(context, expected, rtol=1e-5, atol=1e-6)


def test_additive_score_equals_hand_computed_formula():
    score = AdditiveScore(query_dim=4, key_dim=6, attention_dim=5)
    q, keys = torch.randn(2, 4), torch.randn(2, 3, 6)
    W_q, W_k, b, v = score.query_proj.weight, score.key_proj.weight, score.key_proj.bias, score.v.weight[0]
    expected = torch.empty(2, 3)
    for n in range(2):
        for i in range(3):
            expected[n, i] = v @ torch.tanh(W_q @ q[n] + W_k @ keys[n, i] + b)
    torch.testing.assert_close(score.score(q, keys), expected)


def test_dot_and_general_scores_match_their_formulas():
    q, keys = torch.randn(2, 4), torch.randn(2, 3, 4)
    torch.testing.assert_close(DotScore().score(q, keys), torch.einsum("bd,bld->bl", q, keys))
    general = GeneralScore(4, 4)
    W = general.key_proj.weight
    torch.testing.assert_close(general.score(q, keys), torch.einsum("bd,de,ble->bl", q, W, keys))


@pytest.mark.parametrize("kind", ["additive", "dot", "scaled_dot", "general", "location"])
def test_precomputed_keys_stepping_equals_naive_path(kind):
    torch.manual_seed(1)
    score = build_score(kind, 8, 8, 6)
    keys, queries = torch.randn(3, 10, 8), torch.randn(5, 3, 8)  # 5 decoding steps
    mask = lengths_to_mask(torch.tensor([10, 7, 3]), 10)
    attention = Attention(score)
    memory = attention.precompute(keys, mask=mask)  # once per sequence
    prev = None
    for query in queries:
        stepped, weights = attention(query, memory, prev_weights=prev)
        naive_weights = masked_softmax(score.score(query, keys, prev), mask)  # projects keys again
        torch.testing.assert_close(weights, naive_weights, rtol=0, atol=0)
        torch.testing.assert_close(stepped, soft_read(naive_weights, keys), rtol=0, atol=0)
        prev = weights


def test_location_aware_score_depends_on_previous_weights():
    score = LocationAwareScore(4, 4, 8, num_filters=3, kernel_size=5)
    q, keys = torch.randn(1, 4), torch.randn(1, 9, 4)
    projected = score.precompute(keys)
    at_start = torch.zeros(1, 9)
    at_start[0, 1] = 1.0
    at_end = torch.zeros(1, 9)
    at_end[0, 7] = 1.0
    assert not torch.allclose(score(q, projected, at_start), score(q, projected, at_end))


def test_block_of_queries_matches_one_step_at_a_time():
    attention = Attention(AdditiveScore(4, 6, 5))
    queries, keys = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    memory = attention.precompute(keys, mask=lengths_to_mask(torch.tensor([7, 5]), 7))
    block, block_weights = attention(queries, memory)
    for t in range(3):
        step, step_weights = attention(queries[:, t], memory)
        torch.testing.assert_close(block[:, t], step)
        torch.testing.assert_close(block_weights[:, t], step_weights)


def test_hard_attention_samples_follow_the_weights():
    weights = torch.tensor([[0.1, 0.6, 0.0, 0.3]]).expand(20000, 4)
    values = torch.eye(4).expand(20000, 4, 4)
    context, locations, log_prob = hard_read(weights, values, generator=torch.Generator().manual_seed(0))
    frequency = torch.bincount(locations, minlength=4).float() / len(locations)
    torch.testing.assert_close(frequency, weights[0], atol=0.015, rtol=0)
    assert (locations != 2).all()  # zero weight is never sampled
    torch.testing.assert_close(context, values[0][locations])  # the sampled location is read
    torch.testing.assert_close(log_prob, weights[0][locations].log())


def test_multi_head_matches_torch_multihead_attention():
    mha = MultiHeadAttention(embed_dim=16, num_heads=4)
    reference = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        reference.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        reference.out_proj.weight.copy_(mha.out_proj.weight)
        reference.out_proj.bias.copy_(mha.out_proj.bias)
    x = torch.randn(2, 5, 16)
    causal = causal_mask(5)
    out, weights = mha(x, x, mask=causal)
    expected, expected_weights = reference(x, x, x, attn_mask=~causal, average_attn_weights=False)
    assert weights.shape == (2, 4, 5, 5)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)


def test_the_fused_multi_head_path_gives_the_plain_forms_values_and_gradients():
    from shared.kernels import use_fused

    torch.manual_seed(0)
    mha = MultiHeadAttention(embed_dim=16, num_heads=4, key_bias=False)
    assert mha.k_proj.bias is None and mha.q_proj.bias is not None
    x = torch.randn(3, 6, 16, requires_grad=True)
    mask = lengths_to_mask(torch.tensor([6, 2, 0]), 6)[:, None, :]  # the last sequence has no key at all
    outputs, grads = [], []
    for fused in (False, True):
        with use_fused(fused):
            out, weights = mha(x, x, mask=mask, need_weights=False)
        assert weights is None
        (grad,) = torch.autograd.grad(out.square().sum(), x)
        outputs.append(out)
        grads.append(grad)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)
    assert torch.isfinite(outputs[1]).all() and torch.isfinite(grads[1]).all()  # a row with no key reads nothing, not NaN


def test_build_score_rejects_unknown_kinds_and_mismatched_dot_sizes():
    with pytest.raises(ValueError, match="unknown attention score"):
        build_score("cosine", 4, 4, 4)
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        build_score("dot", 4, 6, 4)


def test_scaled_dot_is_dot_divided_by_sqrt_dim():
    q, keys = torch.randn(2, 9), torch.randn(2, 3, 9)
    torch.testing.assert_close(ScaledDotScore().score(q, keys), DotScore().score(q, keys) / math.sqrt(9))


@pytest.mark.parametrize("kind", ["additive", "location", "dot", "general"])
def test_beam_queries_share_one_memory_row_like_an_expanded_memory(kind):
    attention = Attention(build_score(kind, 8, 8, 6))
    keys, beams = torch.randn(3, 10, 8), 4
    mask = lengths_to_mask(torch.tensor([10, 6, 2]), 10)
    query = torch.randn(3 * beams, 8)
    prev = torch.softmax(torch.randn(3 * beams, 10), -1)
    shared_memory = attention.precompute(keys, mask=mask)
    context, weights = attention(query, shared_memory, prev)
    expected_context, expected_weights = attention(query, shared_memory.repeat_interleave(beams), prev)
    torch.testing.assert_close(context, expected_context)
    torch.testing.assert_close(weights, expected_weights)
    assert context.shape == (12, 8) and weights.shape == (12, 10)


def test_location_aware_scores_a_block_of_queries_each_with_its_own_alignment():
    score = LocationAwareScore(4, 4, 8, num_filters=3, kernel_size=5)
    query, keys, prev = torch.randn(2, 3, 4), torch.randn(2, 9, 4), torch.softmax(torch.randn(2, 3, 9), -1)
    block = score.score(query, keys, prev)
    for t in range(3):
        torch.testing.assert_close(block[:, t], score.score(query[:, t], keys, prev[:, t]))


@pytest.mark.parametrize("kind", ["additive", "location"])
def test_mlp_scores_built_in_blocks_equal_the_tanh_formula_at_once(kind, monkeypatch):
    import shared.kernels

    torch.manual_seed(0)
    score = build_score(kind, 8, 6, 5)
    query, keys, prev = torch.randn(7, 3, 8), torch.randn(7, 9, 6), torch.softmax(torch.randn(7, 3, 9), -1)
    projected = score.precompute(keys)
    hidden = score.query_proj(query).unsqueeze(2) + projected.unsqueeze(1)  # (B, T, L, A)
    if kind == "location":
        location = score.location_conv(prev.reshape(21, 1, 9)).transpose(1, 2).reshape(7, 3, 9, -1)
        hidden = hidden + score.location_proj(location)
    expected = score.v(torch.tanh(hidden)).squeeze(-1)
    monkeypatch.setattr(shared.kernels, "_HIDDEN_BLOCK", 2 * 3 * 9 * 5)  # two sequences per block
    torch.testing.assert_close(score(query, projected, prev), expected, rtol=1e-5, atol=1e-5)


def _double_mlp_case(kind: str):
    """An MLP score in float64 with queries `(7, 3, 8)`, keys `(7, 9, 6)`, previous weights and an upstream gradient."""
    torch.manual_seed(0)
    score = build_score(kind, 8, 6, 5).double()
    query = torch.randn(7, 3, 8, dtype=torch.double, requires_grad=True)
    keys = torch.randn(7, 9, 6, dtype=torch.double, requires_grad=True)
    prev = torch.softmax(torch.randn(7, 3, 9, dtype=torch.double), -1).requires_grad_()
    upstream = torch.randn(7, 3, 9, dtype=torch.double)
    return score, query, keys, prev, upstream


@pytest.mark.parametrize("kind", ["additive", "location"])
def test_mlp_scores_backward_equals_the_gradients_of_the_tanh_formula(kind, monkeypatch):
    import shared.kernels

    score, query, keys, prev, upstream = _double_mlp_case(kind)

    def gradients(scores):
        inputs = [query, keys, *([prev] if kind == "location" else []), *score.parameters()]
        return torch.autograd.grad((scores * upstream).sum(), inputs)

    hidden = score.query_proj(query).unsqueeze(2) + score.precompute(keys).unsqueeze(1)  # (B, T, L, A)
    if kind == "location":
        location = score.location_conv(prev.reshape(21, 1, 9)).transpose(1, 2).reshape(7, 3, 9, -1)
        hidden = hidden + score.location_proj(location)
    expected = gradients(score.v(torch.tanh(hidden)).squeeze(-1))
    monkeypatch.setattr(shared.kernels, "_HIDDEN_BLOCK", 2 * 3 * 9 * 5)  # two sequences per block
    for got, want in zip(gradients(score(query, score.precompute(keys), prev)), expected):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


def test_mlp_scores_backward_under_bf16_autocast_gives_finite_gradients_of_each_inputs_dtype():
    torch.manual_seed(0)
    score = build_score("additive", 8, 6, 5)
    query, keys = torch.randn(4, 8, requires_grad=True), torch.randn(4, 9, 6, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = score(query, score.precompute(keys))
    scores.float().sum().backward()
    assert scores.dtype == torch.bfloat16
    for tensor in (query, keys, *score.parameters()):
        assert tensor.grad.dtype == torch.float32 and torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["additive", "location"])
def test_the_fused_mlp_kernel_and_the_plain_formula_give_the_same_values_and_gradients(kind):
    from shared.kernels import fused_enabled, use_fused

    score, query, keys, prev, upstream = _double_mlp_case(kind)

    def run(fused: bool):
        with use_fused(fused):
            assert fused_enabled() is fused
            scores = score(query, score.precompute(keys), prev)
        inputs = [query, keys, *([prev] if kind == "location" else []), *score.parameters()]
        return scores, torch.autograd.grad((scores * upstream).sum(), inputs)

    (plain, plain_grads), (fused, fused_grads) = run(False), run(True)
    torch.testing.assert_close(fused, plain, rtol=1e-9, atol=1e-10)
    for got, want in zip(fused_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    assert fused_enabled()  # the switch is back on after the block
