"""Token vocabularies (words for captions, characters for speech), saved as JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["Vocabulary", "PAD", "SOS", "EOS", "UNK", "SPECIALS"]

PAD, SOS, EOS, UNK = "<pad>", "<sos>", "<eos>", "<unk>"
SPECIALS = (PAD, SOS, EOS, UNK)  # fixed ids 0..3, so padding is always 0


class Vocabulary:
    """Maps tokens to ids and back. Ids 0..3 are ``<pad> <sos> <eos> <unk>``.

    Args:
        tokens (Sequence[str]): the non-special tokens, in id order.
    """

    def __init__(self, tokens: Sequence[str]):
        duplicates = [t for t, n in Counter(tokens).items() if n > 1]
        if duplicates:
            raise ValueError(f"vocabulary tokens must be unique; repeated: {duplicates[:5]}")
        clash = set(tokens) & set(SPECIALS)
        if clash:
            raise ValueError(f"vocabulary tokens may not include the specials {sorted(clash)}")
        self.itos: list[str] = list(SPECIALS) + list(tokens)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.sos_id, self.eos_id, self.unk_id = (self.stoi[s] for s in SPECIALS)
        self.never_written = (self.pad_id, self.sos_id)  # in no output: decode drops them, a search never chooses them

    @classmethod
    def build(cls, sequences: Iterable[Iterable[str]], min_freq: int = 1, max_size: int | None = None) -> Vocabulary:
        """Vocabulary of the tokens seen at least ``min_freq`` times, most frequent first.

        Args:
            sequences (Iterable[Iterable[str]]): tokenised training texts.
            min_freq (int, optional): rarer tokens map to ``<unk>``. (Default: ``1``)
            max_size (int or None, optional): keep at most this many non-special tokens.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        counts = Counter(token for sequence in sequences for token in sequence)
        for special in SPECIALS:
            counts.pop(special, None)
        # Ties broken alphabetically so the same data always gives the same ids.
        kept = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        return cls(kept[:max_size] if max_size is not None else kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def encode(self, tokens: Iterable[str], add_sos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids; unknown tokens become ``<unk>``."""
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return ([self.sos_id] if add_sos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Tokens for ``ids``; stops at the first ``<eos>`` and drops ``<pad>``/``<sos>`` when stripping."""
        out = []
        for i in ids:
            i = int(i)
            if strip_specials:
                if i == self.eos_id:
                    break
                if i in self.never_written:
                    continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return out

    def to_dict(self) -> dict:
        return {"tokens": self.itos[len(SPECIALS) :]}

    @classmethod
    def from_dict(cls, data: dict) -> Vocabulary:
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise ValueError("a vocabulary must be a JSON object with a 'tokens' list")
        return cls(data["tokens"])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=0), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, ValueError) as err:
            raise ValueError(f"{path}: not a vocabulary file ({err})") from None
