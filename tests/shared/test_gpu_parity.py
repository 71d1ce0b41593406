"""CPU/GPU parity of the attention core (run by scripts/gpu/check.sh with `-m gpu`).

Deselected by default (pytest.ini `-m "not gpu"`); when selected on a machine without CUDA
they fail rather than skip, so a GPU check can never pass vacuously.
"""

import pytest
import torch

from shared import Attention, beam_search, build_score, lengths_to_mask

pytestmark = pytest.mark.gpu

# bf16 keeps 8 bits of mantissa: a relative error of ~1e-2 per op is expected.
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}
# Unscaled dot-product scores of 64-d vectors reach +-30 here, and bf16 rounds a score of 20 by up
# to 0.08, which the softmax turns into weights ~8% off: measured under CPU autocast over 20 seeds,
# the context is off by up to 0.075 (0.010 for additive, location and scaled dot).
UNSCALED_BF16_TOLERANCE = dict(rtol=0.15, atol=0.15)


@pytest.fixture(scope="module")
def cuda():
    assert torch.cuda.is_available(), "the gpu tests need a CUDA device"
    return torch.device("cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["additive", "location", "dot", "scaled_dot", "general"])
def test_attention_step_matches_cpu(cuda, kind, dtype):
    torch.manual_seed(0)
    attention = Attention(build_score(kind, 64, 64, 32))
    keys, query = torch.randn(8, 50, 64), torch.randn(8, 64)
    mask = lengths_to_mask(torch.randint(1, 51, (8,)), 50)
    prev = torch.softmax(torch.randn(8, 50), -1)
    expected_context, expected_weights = attention(query, attention.precompute(keys, mask=mask), prev)
    gpu = attention.to(cuda)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        context, weights = gpu(query.to(cuda), gpu.precompute(keys.to(cuda), mask=mask.to(cuda)), prev.to(cuda))
    tolerance = UNSCALED_BF16_TOLERANCE if kind in ("dot", "general") and dtype == torch.bfloat16 else TOLERANCE[dtype]
    torch.testing.assert_close(context.float().cpu(), expected_context, **tolerance)
    torch.testing.assert_close(weights.float().cpu(), expected_weights, **tolerance)
    assert (weights[~mask.to(cuda)] == 0).all()


def test_beam_search_on_gpu_matches_cpu(cuda):
    torch.manual_seed(0)
    table = torch.randn(4, 10, 6, 6).log_softmax(-1)

    def make_step(device):
        t = table.to(device)

        def step_fn(tokens, state):
            sequence, step = state
            return t[sequence, step, tokens], (sequence, step + 1), None

        return step_fn

    def run(device):
        state = (torch.arange(4, device=device), torch.zeros(4, dtype=torch.long, device=device))
        return beam_search(make_step(device), state, 4, beam_size=3, sos=0, eos=5, max_len=9)

    assert [h[0].tokens for h in run(cuda)] == [h[0].tokens for h in run(torch.device("cpu"))]
