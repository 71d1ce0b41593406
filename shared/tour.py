"""A guided walk through attention, from three numbers to a trained model.

Run it with ``python -m shared.tour`` (or ``make tour``). It needs no data and takes well under
a minute on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from .attention import Attention, MultiHeadAttention
from .masks import causal_mask, lengths_to_mask, masked_softmax
from .scoring import DotScore, ScaledDotScore

__all__ = ["main", "CopyModel", "train_copy_task"]


def _matrix(t: torch.Tensor, fmt: str = "{:6.3f}") -> str:
    return "\n".join("    " + " ".join(fmt.format(x.item()) for x in row) for row in t)


def _heading(number: int, title: str) -> None:
    print(f"\n{number}. {title}\n" + "-" * (len(title) + 3))


def seed_example() -> None:
    _heading(1, "The seed's example: scores become weights")
    words, scores = ["the", "black", "cat"], torch.tensor([1.0, 3.0, 0.0])
    weights = masked_softmax(scores)
    print("A query scores three source positions; softmax turns the scores into weights that sum to 1:")
    for word, score, weight in zip(words, scores, weights):
        print(f"    {word:>6}  score {score:4.1f}  ->  weight {weight:.3f}")
    print(f"    sum of weights: {weights.sum():.3f}   ('black' gets most of the attention)")


def queries_keys_values() -> None:
    _heading(2, "3 queries, 4 keys, 4 values: score, normalise, read")
    torch.manual_seed(0)
    queries, keys, values = torch.randn(1, 3, 4), torch.randn(1, 4, 4), torch.arange(16.0).view(1, 4, 4)
    scores = DotScore().score(queries, keys)[0]  # (3, 4): one row per query
    print("Scores q . k (rows: queries, columns: keys):\n" + _matrix(scores))
    weights = masked_softmax(scores)
    print("Softmax of each row (each row sums to 1):\n" + _matrix(weights))
    print("Read: each query's output is its weighted mix of the values:\n" + _matrix(weights @ values[0], "{:6.2f}"))


def padding_mask() -> None:
    _heading(3, "A padding mask: padded keys get exactly zero weight")
    scores = torch.tensor([[0.5, 2.0, 1.0, 3.0]])
    mask = lengths_to_mask(torch.tensor([2]), max_len=4)  # only the first 2 keys are real
    weights = masked_softmax(scores, mask)
    print(f"    mask    {mask[0].int().tolist()}   (1 = real, 0 = padding)")
    print("    weights " + " ".join(f"{w:.3f}" for w in weights[0]) + f"   sum {weights.sum():.3f}")


def causal_example() -> None:
    _heading(4, "A causal mask: position t reads only positions <= t")
    mask = causal_mask(4)
    weights = masked_softmax(torch.zeros(4, 4), mask)  # equal scores: uniform over what is allowed
    print("Mask:\n" + _matrix(mask.int(), "{:3d}"))
    print("Weights with equal scores:\n" + _matrix(weights))


class CopyModel(nn.Module):
    """Single-head attention that learns to copy a sequence: output t must find input t.

    Keys are token plus position embeddings, values are token embeddings, and each output
    step asks with a learned position query; the attention learns to look up by position.

    Args:
        vocab_size (int): number of symbols.
        length (int): sequence length.
        dim (int, optional): embedding size. (Default: ``32``)
    """

    def __init__(self, vocab_size: int, length: int, dim: int = 32):
        super().__init__()
        self.token = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(length, dim)
        self.query = nn.Embedding(length, dim)
        self.attention = Attention(ScaledDotScore())
        self.out = nn.Linear(dim, vocab_size)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens `(B, T)` -> logits `(B, T, V)` and attention weights `(B, T, T)`."""
        positions = torch.arange(tokens.size(1), device=tokens.device)
        values = self.token(tokens)  # (B, T, D)
        keys = values + self.position(positions)  # (B, T, D)
        queries = self.query(positions).expand(tokens.size(0), -1, -1)  # (B, T, D)
        context, weights = self.attention(queries, self.attention.precompute(keys, values))
        return self.out(context), weights


def train_copy_task(steps: int = 250, length: int = 8, vocab_size: int = 12, seed: int = 0, log_every: int = 50):
    """Train :class:`CopyModel` on random sequences; returns the model and its accuracy."""
    torch.manual_seed(seed)
    model = CopyModel(vocab_size, length)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(1, steps + 1):
        tokens = torch.randint(vocab_size, (64, length))
        logits, _ = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab_size), tokens.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if log_every and (step % log_every == 0 or step == 1):
            print(f"    step {step:4d}  loss {loss.item():.3f}")
    with torch.no_grad():
        tokens = torch.randint(vocab_size, (1000, length))
        logits, _ = model(tokens)
        accuracy = (logits.argmax(-1) == tokens).float().mean().item()
    return model, accuracy


def copy_task() -> float:
    _heading(5, "Train a single-head attention model to copy a sequence")
    start = time.perf_counter()
    model, accuracy = train_copy_task()
    print(f"accuracy: {accuracy:.2f}   (trained in {time.perf_counter() - start:.1f} s on the CPU)")
    with torch.no_grad():
        _, weights = model(torch.randint(12, (1, 8)))
    print("Learned attention (rows: output positions, columns: input positions) is near-diagonal:")
    print(_matrix(weights[0], "{:5.2f}"))
    return accuracy


def multi_head_shapes() -> None:
    _heading(6, "Multi-head attention: the shapes at each step")
    batch, steps, dim, heads = 2, 5, 16, 4
    mha = MultiHeadAttention(dim, heads)
    x = torch.randn(batch, steps, dim)
    print(f"    input                    (batch, sequence, features)        = {tuple(x.shape)}")
    per_head = mha.q_proj(x).view(batch, steps, heads, dim // heads).transpose(1, 2)
    print(f"    queries split into heads (batch, heads, sequence, features) = {tuple(per_head.shape)}")
    out, weights = mha(x, x, mask=causal_mask(steps))
    print(f"    weights per head         (batch, heads, queries, keys)      = {tuple(weights.shape)}")
    print(f"    heads merged, projected  (batch, sequence, features)        = {tuple(out.shape)}")


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m shared.tour", description=__doc__).parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print("attend: a tour of attention (query -> score -> normalise -> read)")
    seed_example()
    queries_keys_values()
    padding_mask()
    causal_example()
    copy_task()
    multi_head_shapes()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
