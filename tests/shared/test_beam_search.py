"""Batched beam search on tiny random models whose best outputs can be found exhaustively."""

import itertools

import pytest
import torch

from shared import beam_search, greedy_search

SOS, EOS, VOCAB = 0, 3, 4


def random_model(batch: int, max_len: int, seed: int, eos_bias: float = 0.0):
    """A model whose next-token distribution depends on the sequence, the step and the last token."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, max_len, VOCAB, VOCAB, generator=generator) * 2
    logits[..., EOS] += eos_bias
    table = logits.log_softmax(-1)  # (B, step, last token, next token)

    def step_fn(tokens, state):
        sequence, step = state
        log_probs = table[sequence, step, tokens]  # (N, V)
        attention = torch.nn.functional.one_hot(step, max_len).float()  # marks the step: (N, L)
        return log_probs, (sequence, step + 1), attention

    initial_state = (torch.arange(batch), torch.zeros(batch, dtype=torch.long))
    return table, step_fn, initial_state


def exhaustive_best(table, sequence: int, max_len: int, never: tuple[int, ...] = ()):
    """Best finished sequence (ending in <eos> within max_len steps, no token of ``never``) by total log-probability."""
    best = (float("-inf"), None)
    for length in range(max_len):  # tokens before <eos>
        for tokens in itertools.product([t for t in range(VOCAB) if t != EOS and t not in never], repeat=length):
            last, score = SOS, 0.0
            for step, token in enumerate((*tokens, EOS)):
                score += float(table[sequence, step, last, token])
                last = token
            best = max(best, (score, list(tokens)), key=lambda x: x[0])
    return best


@pytest.mark.parametrize("seed", range(5))
def test_beam_search_with_a_wide_beam_equals_exhaustive_search(seed):
    max_len, batch = 4, 3
    table, step_fn, state = random_model(batch, max_len, seed)
    results = beam_search(step_fn, state, batch, beam_size=200, sos=SOS, eos=EOS, max_len=max_len)
    for b in range(batch):
        score, tokens = exhaustive_best(table, b, max_len)
        assert results[b][0].finished
        assert results[b][0].tokens == tokens
        assert results[b][0].score == pytest.approx(score, abs=1e-5)


@pytest.mark.parametrize("seed", range(8))
def test_beam_one_equals_greedy(seed):
    max_len, batch = 6, 5
    _, step_fn, state = random_model(batch, max_len, seed, eos_bias=0.5)
    beams = beam_search(step_fn, state, batch, beam_size=1, sos=SOS, eos=EOS, max_len=max_len)
    greedy = greedy_search(step_fn, state, batch, sos=SOS, eos=EOS, max_len=max_len)
    assert [hyps[0].tokens for hyps in beams] == greedy


def test_batched_decoding_equals_one_sequence_at_a_time():
    max_len, batch = 6, 4
    table, step_fn, state = random_model(batch, max_len, seed=3, eos_bias=0.3)
    batched = beam_search(step_fn, state, batch, beam_size=3, sos=SOS, eos=EOS, max_len=max_len, nbest=3)
    for b in range(batch):
        single_state = (torch.tensor([b]), torch.zeros(1, dtype=torch.long))
        single = beam_search(step_fn, single_state, 1, beam_size=3, sos=SOS, eos=EOS, max_len=max_len, nbest=3)[0]
        assert [h.tokens for h in batched[b]] == [h.tokens for h in single]
        assert [h.score for h in batched[b]] == pytest.approx([h.score for h in single])


def test_nbest_is_sorted_and_attention_has_one_row_per_token():
    max_len, batch = 6, 2
    _, step_fn, state = random_model(batch, max_len, seed=5, eos_bias=0.5)
    results = beam_search(step_fn, state, batch, beam_size=4, sos=SOS, eos=EOS, max_len=max_len, nbest=4)
    for hyps in results:
        assert len(hyps) == 4
        scores = [h.normalized_score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            assert h.attention.shape == (len(h.tokens), max_len)
            # Row i is the attention of the step that produced token i (the model marks steps).
            assert h.attention.argmax(-1).tolist() == list(range(len(h.tokens)))


def test_returns_best_unfinished_hypothesis_when_nothing_ends():
    max_len = 5
    table, step_fn, state = random_model(2, max_len, seed=0, eos_bias=-1e9)
    results = beam_search(step_fn, state, 2, beam_size=3, sos=SOS, eos=EOS, max_len=max_len)
    for hyps in results:
        assert not hyps[0].finished
        assert len(hyps[0].tokens) == max_len
        assert EOS not in hyps[0].tokens


def test_per_sequence_max_len_is_respected():
    table, step_fn, state = random_model(2, 8, seed=1, eos_bias=-1e9)
    results = beam_search(step_fn, state, 2, beam_size=2, sos=SOS, eos=EOS, max_len=torch.tensor([3, 8]))
    assert [len(h[0].tokens) for h in results] == [3, 8]


def test_length_penalty_prefers_longer_hypotheses():
    # Two continuations: stop now (log p = -1.0) or emit one token then stop (-0.8 + -0.8 = -1.6).
    def step_fn(tokens, state):
        (step,) = state
        log_probs = torch.full((tokens.numel(), VOCAB), -50.0)
        first = step == 0
        log_probs[first, EOS], log_probs[first, 1] = -1.0, -0.8
        log_probs[~first, EOS] = -0.8
        return log_probs, (step + 1,), None

    state = (torch.zeros(1, dtype=torch.long),)
    raw = beam_search(step_fn, state, 1, beam_size=2, sos=SOS, eos=EOS, max_len=4)[0][0]
    normalised = beam_search(step_fn, state, 1, beam_size=2, sos=SOS, eos=EOS, max_len=4, length_penalty=1.0)[0][0]
    assert raw.tokens == [] and normalised.tokens == [1]  # -1.0 > -1.6, but -1.0/1 < -1.6/2
    assert normalised.normalized_score == pytest.approx(-0.8)


def memory_model(batch: int, max_len: int, seed: int, eos_bias: float = 0.0):
    """``random_model`` with each sequence's table in ``memory`` (one row per sequence, not per beam)."""
    table, _, _ = random_model(batch, max_len, seed, eos_bias)
    rows_seen = []

    def step_fn(tokens, state, memory):
        (step,) = state
        rows_seen.append((tokens.size(0), memory.size(0)))
        beams = tokens.size(0) // memory.size(0)  # consecutive rows share a memory row
        per_row = memory.repeat_interleave(beams, dim=0)  # (N, max_len, V, V)
        log_probs = per_row[torch.arange(tokens.size(0)), step, tokens]
        attention = torch.nn.functional.one_hot(tokens, VOCAB).float()  # marks the token read: (N, V)
        return log_probs, (step + 1,), attention

    return table, step_fn, (torch.zeros(batch, dtype=torch.long),), rows_seen


def test_done_sequences_leave_the_batch_without_changing_results():
    batch, beams, max_len = 8, 3, 9
    table, step_fn, state, rows_seen = memory_model(batch, max_len, seed=4, eos_bias=-1e9)
    limits = torch.tensor([2, 9, 3, 9, 2, 4, 9, 3])  # nothing ends early: sequences stop at their limits
    caller_table = table.clone()
    batched = beam_search(step_fn, state, batch, beams, SOS, EOS, max_len=limits, nbest=3, memory=table)
    # Three compactions (8 -> 6 -> 4 -> 3 sequences); the later ones move rows within the search's
    # own copy, never within the caller's memory.
    assert [m for _, m in rows_seen] == [8, 8, 6, 4, 3, 3, 3, 3, 3]
    assert torch.equal(table, caller_table)
    assert rows_seen[0] == (batch, batch)  # the first step runs one row per sequence
    assert rows_seen[1] == (batch * beams, batch)
    assert rows_seen[-1] == (3 * beams, 3)  # only the three longest are left at the end
    for b in range(batch):
        single = beam_search(
            step_fn,
            (torch.zeros(1, dtype=torch.long),),
            1,
            beams,
            SOS,
            EOS,
            max_len=int(limits[b]),
            nbest=3,
            memory=table[b : b + 1],
        )[0]
        assert [h.tokens for h in batched[b]] == [h.tokens for h in single]
        assert [h.score for h in batched[b]] == pytest.approx([h.score for h in single])
        assert len(batched[b][0].tokens) == limits[b]


def test_memory_step_function_equals_the_closure_one():
    batch, max_len = 5, 6
    _, closure_step, closure_state = random_model(batch, max_len, seed=2, eos_bias=0.4)
    table, memory_step, memory_state, _ = memory_model(batch, max_len, seed=2, eos_bias=0.4)
    expected = beam_search(closure_step, closure_state, batch, 4, SOS, EOS, max_len=max_len, nbest=4)
    got = beam_search(memory_step, memory_state, batch, 4, SOS, EOS, max_len=max_len, nbest=4, memory=table)
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in expected]
    assert greedy_search(memory_step, memory_state, batch, SOS, EOS, max_len, memory=table) == greedy_search(
        closure_step, closure_state, batch, SOS, EOS, max_len
    )


def test_attention_follows_each_hypothesis_through_reordering_and_compaction():
    batch, beams, max_len = 6, 3, 8
    table, step_fn, state, rows_seen = memory_model(batch, max_len, seed=7, eos_bias=-1.5)
    limits = torch.tensor([3, 8, 2, 8, 5, 4])
    results = beam_search(step_fn, state, batch, beams, SOS, EOS, max_len=limits, nbest=beams, memory=table)
    for hyps in results:
        for h in hyps:
            assert h.attention.shape == (len(h.tokens), VOCAB)
            # Row i is the step that produced token i; it read the token before it.
            assert h.attention.argmax(-1).tolist() == ([SOS] + h.tokens)[: len(h.tokens)]
    assert rows_seen[-1][1] < batch  # sequences did leave the batch


def test_must_end_allows_only_eos_at_each_sequence_s_last_step():
    batch, limit = 4, 5
    _, step_fn, state = random_model(batch, 8, seed=3, eos_bias=-50.0)  # <eos> practically never chosen
    free = beam_search(step_fn, state, batch, beam_size=3, sos=SOS, eos=EOS, max_len=limit)
    assert all(not h[0].finished and len(h[0].tokens) == limit for h in free)  # the limit, all words
    limits = torch.tensor([1, 2, 5, 3])
    ended = beam_search(step_fn, state, batch, beam_size=3, sos=SOS, eos=EOS, max_len=limits, must_end=True)
    for hyps, n in zip(ended, limits.tolist()):
        assert hyps[0].finished and len(hyps[0].tokens) == n - 1  # n - 1 tokens, then the forced <eos>
        assert hyps[0].attention.shape[0] == n - 1


@pytest.mark.parametrize("seed", range(4))
def test_tokens_that_are_never_chosen_appear_in_no_hypothesis_and_the_search_is_exact_without_them(seed):
    max_len, batch, never = 4, 3, (SOS, 1)  # as <sos> and <pad>: no output holds them
    table, step_fn, state = random_model(batch, max_len, seed)
    table[:, :, :, SOS] += 3.0  # tempting: without the ban some best outputs would hold <sos>
    wide = beam_search(step_fn, state, batch, beam_size=200, sos=SOS, eos=EOS, max_len=max_len, nbest=20, never=never)
    for b in range(batch):
        score, tokens = exhaustive_best(table, b, max_len, never)
        assert wide[b][0].tokens == tokens and wide[b][0].score == pytest.approx(score, abs=1e-5)
        assert all(not set(h.tokens) & set(never) for h in wide[b])
    assert any(SOS in exhaustive_best(table, b, max_len)[1] for b in range(batch))  # the ban changed something
    beams = beam_search(step_fn, state, batch, beam_size=1, sos=SOS, eos=EOS, max_len=max_len, never=never)
    greedy = greedy_search(step_fn, state, batch, sos=SOS, eos=EOS, max_len=max_len, never=never)
    assert [h[0].tokens for h in beams] == greedy


def test_the_end_token_cannot_be_banned():
    _, step_fn, state = random_model(2, 4, seed=0)
    with pytest.raises(ValueError, match="end token"):
        beam_search(step_fn, state, 2, beam_size=2, sos=SOS, eos=EOS, max_len=4, never=(EOS,))
    with pytest.raises(ValueError, match="end token"):
        greedy_search(step_fn, state, 2, sos=SOS, eos=EOS, max_len=4, never=(EOS,))


def test_each_hypothesis_keeps_every_parts_score_of_each_token_its_eos_included():
    # Two scorers, each a per-sequence table of next-token log-probabilities given the last token;
    # the step sums them with weights 1 and 0.5 and returns them as parts. The sequences end at
    # different steps, so done ones leave the batch (compaction) while the parts are recorded.
    generator = torch.Generator().manual_seed(3)
    tables = {name: torch.randn(4, VOCAB, VOCAB, generator=generator).log_softmax(-1) for name in ("a", "b")}  # (B, V, V)

    def step(tokens, state):
        parts = {name: table[state[:, 0], tokens] for name, table in tables.items()}
        return parts["a"] + 0.5 * parts["b"], state, None, parts

    results = beam_search(step, torch.arange(4)[:, None], 4, 3, SOS, EOS, max_len=torch.tensor([2, 3, 6, 9]), nbest=3)
    assert any(h.finished for hyps in results for h in hyps) and any(not h.finished for hyps in results for h in hyps)
    for b, hyps in enumerate(results):
        for hyp in hyps:
            tokens = hyp.tokens + ([EOS] if hyp.finished else [])
            previous = [SOS, *tokens[:-1]]
            for name, table in tables.items():
                expected = [float(table[b, p, t]) for p, t in zip(previous, tokens)]
                assert hyp.part_scores[name] == pytest.approx(expected, abs=1e-6)
            assert sum(hyp.part_scores["a"]) + 0.5 * sum(hyp.part_scores["b"]) == pytest.approx(hyp.score, abs=1e-4)


def test_a_step_function_without_parts_gives_hypotheses_without_part_scores():
    _, step_fn, state = random_model(2, 5, seed=1, eos_bias=0.0)
    results = beam_search(step_fn, state, 2, 3, SOS, EOS, max_len=5, nbest=3)
    assert all(h.part_scores is None for hyps in results for h in hyps)
