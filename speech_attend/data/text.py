"""Transcript normalisation: one documented policy that every corpus goes through.

Policy of :func:`normalize_text`, in order:

1. Unicode NFKC (compatibility forms fold: full-width letters, ligatures, ``²`` -> ``2``).
2. Typographic apostrophes (``’ ‘ ʼ ´`` and the backtick) become ``'``, so Common Voice's
   curly quotes and LibriSpeech's straight ones agree.
3. Lower-case, when ``lowercase`` is true.
4. Letters (with their combining marks), digits and whitespace are kept, and so are the
   characters listed in ``keep_punctuation``; every other character becomes a space, so
   ``"well-known"`` reads ``"well known"`` rather than ``"wellknown"``.
5. A word made only of kept punctuation (a stray quote mark) is dropped.
6. Whitespace runs collapse to one space; leading and trailing space is removed.

Characters that survive the normaliser but lie outside a model's alphabet are a separate
decision: :func:`map_out_of_vocabulary` drops them or raises, as the caller chooses
(:class:`speech_attend.train.datamodule.SpeechDataModule` applies it to validation and test transcripts,
with the alphabet of the training text; option ``oov_policy``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

__all__ = ["normalize_text", "unknown_characters", "map_out_of_vocabulary", "OOV_POLICIES"]

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u00b4": "'", "`": "'"})

OOV_POLICIES = ("drop", "error")


def _kept(char: str, keep_punctuation: str) -> bool:
    if char.isspace() or char in keep_punctuation:
        return True
    # L* letters, M* combining marks (needed by scripts that NFKC cannot compose), Nd digits.
    category = unicodedata.category(char)
    return category[0] in "LM" or category == "Nd"


def normalize_text(text: str, lowercase: bool = True, keep_punctuation: str = "'") -> str:
    """Normalise a transcript with the policy in this module's docstring.

    Args:
        text (str): raw transcript.
        lowercase (bool, optional): fold to lower case. (Default: ``True``)
        keep_punctuation (str, optional): punctuation characters to keep; every other
            non-letter, non-digit character becomes a space. (Default: ``"'"``)

    Returns:
        str: the normalised transcript; ``""`` when nothing is left.

    Example:
        >>> normalize_text("  Don’t   STOP -- the Café’s open!  ")
        "don't stop the café's open"
    """
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    if lowercase:
        text = text.lower()
    text = "".join(c if _kept(c, keep_punctuation) else " " for c in text)
    words = [w for w in text.split() if not all(c in keep_punctuation for c in w)]
    return " ".join(words)


def unknown_characters(text: str, charset: Iterable[str]) -> list[str]:
    """The distinct characters of ``text`` that are not in ``charset``, sorted."""
    allowed = set(charset)
    return sorted({c for c in text if c not in allowed})


def map_out_of_vocabulary(text: str, charset: Iterable[str], policy: str = "drop") -> str:
    """Apply a policy to the characters of ``text`` that are not in ``charset``.

    Args:
        text (str): a transcript, normally already passed through :func:`normalize_text`.
        charset (iterable of str): the characters the model can emit (e.g. a vocabulary's
            characters, including ``" "`` if words are separated).
        policy (str, optional): ``"drop"`` removes each unknown character and collapses the
            whitespace left behind; ``"error"`` raises. (Default: ``"drop"``)

    Returns:
        str: ``text`` with only characters from ``charset``.

    Raises:
        ValueError: ``policy`` is unknown, or it is ``"error"`` and ``text`` has characters
            outside ``charset`` (the message lists them).
    """
    if policy not in OOV_POLICIES:
        raise ValueError(f"policy must be one of {OOV_POLICIES}, got {policy!r}")
    allowed = set(charset)
    unknown = unknown_characters(text, allowed)
    if not unknown:
        return text
    if policy == "error":
        listed = ", ".join(repr(c) for c in unknown)
        raise ValueError(f"characters outside the character set: {listed} in {text!r}")
    kept = "".join(c for c in text if c in allowed)
    return " ".join(kept.split()) if " " in allowed else kept
