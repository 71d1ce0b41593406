"""The recognizer's parts on tiny inputs: features, listener, sampler, loss, decoding, chunking."""

import random

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from shared import Vocabulary, greedy_search
from speech_attend.data.dataset import Batch, Collate
from speech_attend.data.sampler import BucketBatchSampler
from speech_attend.infer.pauses import split_at_pauses, split_at_quiet_points
from speech_attend.model.features import FeatureConfig, FeatureFrontend, SpecAugment
from speech_attend.model.las import DecodeConfig, LASConfig
from speech_attend.model.listener import _BLSTM, Listener
from speech_attend.train.module import RecognizerModule

TINY = LASConfig(
    listener_hidden=8,
    pyramid_layers=2,
    speller_hidden=16,
    embedding_dim=8,
    attention_dim=8,
    location_filters=2,
    location_kernel=5,
    dropout=0.0,
    ctc_upsample=2,
)
CHARS = list("abc ")


# ----------------------------------------------------------------------------- listener


@pytest.mark.parametrize("lengths", [[37, 16, 9], [8, 31, 15]])
def test_listener_output_lengths_are_exact_for_odd_lengths(lengths):
    torch.manual_seed(0)
    listener = Listener(6, hidden=4, layers=1, pyramid_layers=3, input_stack=1).eval()
    x = torch.randn(len(lengths), max(lengths), 6)
    out, out_lengths = listener(x, torch.tensor(lengths))
    assert out_lengths.tolist() == [n // 8 for n in lengths]
    assert out.shape == (len(lengths), max(lengths) // 8, 8)
    for b, n in enumerate(out_lengths.tolist()):
        assert out[b, n:].abs().sum() == 0  # padding positions come out as zeros


def test_listener_output_ignores_padding():
    torch.manual_seed(0)
    listener = Listener(6, hidden=4, layers=1, pyramid_layers=2, input_stack=2).eval()
    x = torch.randn(1, 45, 6)
    alone, n = listener(x, torch.tensor([45]))
    padded_input = torch.cat([x, torch.randn(1, 30, 6) * 10], dim=1)  # loud garbage after the end
    padded, m = listener(padded_input, torch.tensor([45]))
    assert n.tolist() == m.tolist() == [45 // 8]
    torch.testing.assert_close(padded[:, : int(n)], alone[:, : int(n)])


def test_native_cpu_kernels_keep_the_location_filter_off_nnpack():
    # PyTorch picks NNPACK for a convolution over 16+ rows with a kernel under 17, and it ran the
    # batched beam search's location filter ~20x slower than the native kernel.
    from torch.profiler import profile

    from speech_attend.model.las import native_cpu_kernels

    conv, weights = torch.nn.Conv1d(1, 10, 15, padding=7, bias=False), torch.rand(32, 1, 100)

    def kernels() -> set[str]:
        with torch.no_grad(), profile() as prof:
            conv(weights)
        return {event.key for event in prof.key_averages()}

    if torch.backends.nnpack.is_available():  # the control: turning oneDNN off alone sends it to NNPACK
        with torch.backends.mkldnn.flags(enabled=False):
            assert "aten::_nnpack_spatial_convolution" in kernels()
    with native_cpu_kernels():
        used = kernels()
    assert "aten::_nnpack_spatial_convolution" not in used and "aten::mkldnn_convolution" not in used


@pytest.mark.parametrize("grad", [True, False], ids=["training-padded", "decoding-packed"])
def test_blstm_equals_a_packed_bidirectional_lstm(grad):
    torch.manual_seed(0)
    ours = _BLSTM(5, 3)
    reference = torch.nn.LSTM(5, 3, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(reference, f"{name}_l0").copy_(getattr(ours.forward_lstm, f"{name}_l0"))
            getattr(reference, f"{name}_l0_reverse").copy_(getattr(ours.backward_lstm, f"{name}_l0"))
    x, lengths = torch.randn(3, 11, 5), torch.tensor([11, 4, 7])
    packed, _ = reference(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    expected, _ = pad_packed_sequence(packed, batch_first=True, total_length=11)
    with torch.set_grad_enabled(grad):  # with gradients the padded path runs, without them the packed one
        torch.testing.assert_close(ours(x, lengths), expected.detach())


# ----------------------------------------------------------------------------- sampler


def _lengths(n=103, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(50, 500, (n,), generator=g).tolist()


def test_bucket_sampler_yields_every_item_once_per_epoch_with_similar_lengths():
    lengths = _lengths()
    sampler = BucketBatchSampler(lengths, batch_size=8, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert len(batches) == len(sampler)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 40  # buckets group similar lengths (random batches would spread ~350)
    sampler.set_epoch(1)
    assert list(sampler) != batches  # a new order each epoch
    assert sorted(i for b in sampler for i in b) == list(range(len(lengths)))


@pytest.mark.parametrize("epoch", [0, 3])
def test_bucket_sampler_under_two_ranks_is_disjoint_and_complete(epoch):
    lengths = _lengths(n=61)
    ranks = [BucketBatchSampler(lengths, batch_size=8, seed=5, num_replicas=2, rank=r) for r in (0, 1)]
    for sampler in ranks:
        sampler.set_epoch(epoch)
    seen = [[i for b in sampler for i in b] for sampler in ranks]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(len(lengths)))
    assert len(list(ranks[0])) == len(list(ranks[1])) == len(ranks[0])  # same number of steps


def test_bucket_sampler_gives_the_ranks_of_a_step_batches_of_nearly_the_same_length():
    lengths = _lengths(n=400)
    ranks = [BucketBatchSampler(lengths, batch_size=8, seed=5, num_replicas=2, rank=r) for r in (0, 1)]
    for sampler in ranks:
        sampler.set_epoch(2)
    longest = [[max(lengths[i] for i in b) for b in sampler] for sampler in ranks]
    gaps = [abs(a - b) for a, b in zip(*longest)]
    assert sum(gaps) / len(gaps) < 15  # paired at random they differ by ~140 frames here
    assert longest[0] != sorted(longest[0])  # still shuffled: the steps are not in length order


def test_bucket_sampler_order_on_one_process_is_unchanged_by_the_step_grouping():
    lengths = _lengths()
    sampler = BucketBatchSampler(lengths, batch_size=8, seed=3)
    sampler.set_epoch(1)
    rng = random.Random("3/1")  # the sampler's own stream: ties first, then the batch shuffle
    ties = [rng.random() for _ in lengths]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], ties[i]))
    expected = [order[i : i + 8] for i in range(0, len(order), 8)]
    rng.shuffle(expected)
    assert list(sampler) == expected


def test_bucket_sampler_respects_max_frames():
    lengths = _lengths()
    sampler = BucketBatchSampler(lengths, batch_size=100, max_frames=1200, seed=2)
    batches = list(sampler)
    assert all(len(b) * max(lengths[i] for i in b) <= 1200 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))


# ----------------------------------------------------------------------------- features


def test_spec_augment_masks_only_in_training():
    torch.manual_seed(0)
    augment = SpecAugment(FeatureConfig(freq_masks=2, freq_mask_width=10, time_masks=2, time_mask_width=20, time_mask_ratio=0.5))
    features, frames = torch.randn(4, 100, 80), torch.tensor([100, 80, 60, 40])
    augment.train()
    masked = augment(features, frames)
    assert (masked == 0).any() and not torch.equal(masked, features)
    augment.eval()
    assert torch.equal(augment(features, frames), features)


def test_global_statistics_normalise_training_features():
    torch.manual_seed(0)
    frontend = FeatureFrontend(FeatureConfig(freq_masks=0, time_masks=0))
    waves = [torch.randn(2, 4000) * 0.1 + torch.sin(torch.arange(4000) / 5.0), torch.randn(2, 3000) * 0.3]
    batches = [(w, torch.full((2,), w.size(1))) for w in waves]
    assert not frontend.norm.initialised
    frames = frontend.accumulate_statistics(batches)
    assert frontend.norm.initialised and frames == 2 * (1 + (4000 - 400) // 160) + 2 * (1 + (3000 - 400) // 160)
    features = torch.cat([frontend(w, n)[0].reshape(-1, 80) for w, n in batches])
    torch.testing.assert_close(features.mean(0), torch.zeros(80), atol=1e-3, rtol=0)
    torch.testing.assert_close(features.std(0, unbiased=False), torch.ones(80), atol=1e-3, rtol=0)
    assert "norm.mean" in frontend.state_dict()  # travels with the checkpoint


# ----------------------------------------------------------------------------- loss and decoding


def _recognizer(**kwargs):
    torch.manual_seed(0)
    module = RecognizerModule(las=TINY, features=FeatureConfig(freq_masks=0, time_masks=0), vocabulary=CHARS, **kwargs)
    return module


def _batch():
    g = torch.Generator().manual_seed(1)
    waves = torch.randn(3, 6000, generator=g) * 0.1
    lengths = torch.tensor([6000, 4500, 3000])
    return Collate(Vocabulary(CHARS)).with_texts(Batch(waves, lengths, [], ["u1", "u2", "u3"]), ["abc ab", "ca", "b"])


def test_joint_ctc_attention_loss_is_finite_and_reaches_every_part():
    module = _recognizer(ctc_weight=0.4)
    losses = module._loss(_batch())
    assert {"loss", "attention_loss", "ctc_loss"} <= set(losses)
    assert all(torch.isfinite(v) for v in losses.values())
    torch.testing.assert_close(losses["loss"], 0.6 * losses["attention_loss"] + 0.4 * losses["ctc_loss"])
    losses["loss"].backward()
    for part in (module.model.listener, module.model.speller, module.model.ctc_head):
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in part.parameters())


def test_the_consistency_loss_draws_the_listeners_states_of_noisy_audio_toward_its_states_of_the_reference():
    module = _recognizer(ctc_weight=0.3, consistency_weight=0.5).train()
    batch = _batch()
    with pytest.raises(ValueError, match="needs training batches with references"):
        module._loss(batch)
    assert "consistency_loss" not in module._loss(batch._replace(references=batch.waveforms.clone()))  # nothing added
    assert "consistency_loss" not in module.eval()._loss(batch)  # validation: the loss as before
    module.train()
    noise = torch.randn(batch.waveforms.shape, generator=torch.Generator().manual_seed(2)) * 0.05
    noisy = batch._replace(waveforms=batch.waveforms + noise, references=batch.waveforms)
    noisy = noisy._replace(waveforms=noisy.waveforms * (torch.arange(6000)[None] < batch.lengths[:, None]))
    noisy = noisy._replace(waveforms=torch.where(torch.tensor([[True], [False], [True]]), noisy.waveforms, batch.waveforms))
    losses = module._loss(noisy)
    assert float(losses["consistency_loss"].detach()) > 0
    torch.testing.assert_close(
        losses["loss"], 0.7 * losses["attention_loss"] + 0.3 * losses["ctc_loss"] + 0.5 * losses["consistency_loss"]
    )
    # Its value: over the frames of the two utterances whose audio differs, without dropout on either side.
    module.eval()
    with torch.no_grad():
        heard, frames = module.model.encode(noisy.waveforms[[0, 2]], batch.lengths[[0, 2]])
        reference, _ = module.model.encode(batch.waveforms[[0, 2]], batch.lengths[[0, 2]])
    distance = (heard - reference).square().sum(-1) / reference.square().sum(-1)
    expected = torch.cat([distance[0, : frames[0]], distance[1, : frames[1]]]).mean()
    module.train()  # TINY has no dropout: training mode draws nothing
    module.zero_grad()
    term = module._consistency_loss(noisy, *module.model.encode(noisy.waveforms, noisy.lengths, drop_output=False))
    torch.testing.assert_close(term, expected, rtol=1e-4, atol=1e-6)
    # The gradient reaches the listener (through the training audio: the reference has none), not the speller.
    term.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.model.listener.parameters())
    assert all(p.grad is None for p in module.model.speller.parameters())
    with pytest.raises(ValueError, match="consistency_weight must be in"):
        _recognizer(consistency_weight=-1.0)


def test_beam_search_with_one_beam_equals_greedy_decoding():
    module = _recognizer().eval()
    model, vocab = module.model, module.vocabulary
    batch = _batch()
    hyps, _ = model.decode(batch.waveforms, batch.lengths, DecodeConfig(ctc_weight=0.0, max_len_ratio=3.0), beam_size=1)
    states, lengths = model.encode(batch.waveforms, batch.lengths)
    memory, state = model.speller.start(states, lengths)
    greedy = greedy_search(
        lambda t, s: model.speller.step(t, s, memory),
        state,
        3,
        vocab.sos_id,
        vocab.eos_id,
        max_len=int((lengths.max() * 3.0).ceil()) + 1,
        max_repeats=DecodeConfig().max_repeats,  # an untrained speller loops: both stop it alike
        never=vocab.never_written,
    )  # and writes <sos>: neither chooses it
    limits = (lengths * 3.0).ceil().long() + 1
    for hyp, tokens, limit in zip(hyps, greedy, limits.tolist()):
        assert hyp.tokens == tokens[:limit]
        assert hyp.attention.shape == (len(hyp.tokens), states.size(1))


def test_a_few_training_steps_lower_the_loss():
    module = _recognizer(ctc_weight=0.3, label_smoothing=0.0, scheduled_sampling=0.0)
    module.train()
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    batch = _batch()
    losses = []
    for _ in range(15):
        loss = module._loss(batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_audio_shorter_than_one_listener_frame_is_a_clear_error():
    module = _recognizer()
    with pytest.raises(ValueError, match="shorter than one listener frame"):
        module.model.encode(torch.zeros(1, 500), torch.tensor([500]))


# ----------------------------------------------------------------------------- chunking


def test_long_audio_is_cut_at_quiet_points():
    rate = 1000
    tone = torch.sin(torch.arange(3 * rate) * 0.5)  # 3 s of "speech"
    silence = torch.zeros(int(0.4 * rate))
    wave = torch.cat([tone, silence, tone, silence, tone, silence, tone])  # pauses end at 3.4, 6.8, 10.2 s
    spans = split_at_quiet_points(wave, rate, max_seconds=5.0)
    assert spans[0][0] == 0 and spans[-1][1] == wave.numel()
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, nothing lost
    assert all(end - start <= 5 * rate for start, end in spans)
    for _, cut in spans[:-1]:
        assert wave[cut - 50 : cut + 50].abs().max() < 1e-6  # inside a pause
    assert split_at_quiet_points(wave[: 4 * rate], rate, max_seconds=5.0) == [(0, 4 * rate)]


def _phrases(rate: int, gaps: list[float], seconds: float = 1.0, lead: float = 0.0) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Tone bursts ("phrases") of ``seconds`` separated by silences of ``gaps`` seconds, after ``lead`` s of silence."""
    tone = torch.sin(torch.arange(int(seconds * rate)) * 0.5)
    parts, phrases, position = [torch.zeros(int(lead * rate))], [], int(lead * rate)
    for gap in [*gaps, None]:
        parts.append(tone)
        phrases.append((position, position + tone.numel()))
        position += tone.numel()
        if gap is not None:
            parts.append(torch.zeros(int(gap * rate)))
            position += int(gap * rate)
    return torch.cat(parts), phrases


def test_long_audio_is_cut_at_every_pause_and_each_chunk_trimmed_to_its_speech():
    rate = 1000
    wave, phrases = _phrases(rate, gaps=[0.3, 0.05, 0.4, 0.2], lead=0.5)
    spans = split_at_pauses(wave, rate, max_seconds=3.0)
    # Cut at the 0.3, 0.4 and 0.2 s pauses, not at the 50 ms one (inside a phrase); each chunk runs
    # from its first tone's first sample to its last tone's last, to the 10 ms frame.
    expected = [phrases[0], (phrases[1][0], phrases[2][1]), phrases[3], phrases[4]]
    assert len(spans) == len(expected)
    for (start, end), (first, last) in zip(spans, expected):
        assert abs(start - first) <= 10 and abs(end - last) <= 10


def test_audio_no_longer_than_a_chunk_stays_whole_but_loses_long_silent_edges():
    rate = 1000
    wave, [(first, last)] = _phrases(rate, gaps=[], lead=0.5)
    padded = torch.cat([wave, torch.zeros(700)])
    [(start, end)] = split_at_pauses(padded, rate, max_seconds=3.0)
    assert abs(start - first) <= 10 and abs(end - last) <= 10
    # Quiet edges under 50 ms are part of the speech's onset and decay: left as they are.
    tight = torch.cat([torch.zeros(30), wave[first:last], torch.zeros(20)])
    assert split_at_pauses(tight, rate, max_seconds=3.0) == [(0, tight.numel())]


def test_long_audio_without_pauses_is_still_cut_to_the_longest_chunk():
    rate = 1000
    wave = torch.sin(torch.arange(10 * rate) * 0.5) * torch.linspace(0.2, 1.0, 10 * rate)  # no pause at all
    spans = split_at_pauses(wave, rate, max_seconds=3.0)
    assert spans[0][0] == 0 and spans[-1][1] == wave.numel()
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and all(end - start <= 3 * rate for start, end in spans)


def test_without_trimming_chunks_keep_their_quiet_edges_and_cover_the_audio():
    rate = 1000
    wave, _ = _phrases(rate, gaps=[0.3, 0.4], lead=0.5)
    wave = torch.cat([wave, torch.zeros(600)])
    trimmed = split_at_pauses(wave, rate, max_seconds=3.0)
    kept = split_at_pauses(wave, rate, max_seconds=3.0, trim=False)
    assert len(kept) == len(trimmed) == 3  # the same cuts
    assert kept[0][0] == 0 and kept[-1][1] == wave.numel() and trimmed[0][0] > 400 and trimmed[-1][1] < wave.numel() - 500
    assert all(a[1] == b[0] for a, b in zip(kept, kept[1:]))  # cut in the pauses, nothing left out


def test_silence_is_one_untrimmed_chunk():
    assert split_at_pauses(torch.zeros(2000), 1000, max_seconds=3.0) == [(0, 2000)]
