"""Numbers written as digits, spelled out as a reader would say them.

A transcript must hold what was spoken, and a synthesiser reads ``1948`` as "nineteen forty
eight" but ``1,948`` as "one thousand nine hundred and forty eight"; spelling numbers out
before synthesis makes the transcript and the audio agree whatever the engine's own rules.

Readings, in the order :func:`spell_numbers` applies them:

- ``$5``, ``$1,000``, ``$2.50`` -> "five dollars", "one thousand dollars", "two dollars fifty"
- ``10%`` -> "ten percent"
- ``13th``, ``1st``, ``22nd`` -> "thirteenth", "first", "twenty second"
- ``82.6`` -> "eighty two point six"
- ``1948`` (four digits from 1100 to 1999, or 2010 to 2099, no comma) -> "nineteen forty
  eight", as years are read; ``2005`` -> "two thousand and five"
- every other whole number (commas allowed) -> British-style cardinal with "and":
  ``1,250`` -> "one thousand two hundred and fifty"

Words are separated by spaces (no hyphens), so the text normaliser leaves them alone.
"""

from __future__ import annotations

import re

__all__ = ["spell_number", "spell_ordinal", "spell_year", "spell_numbers"]

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_MAX = 10**15  # larger numbers are left as digits (and their sentences dropped by the caller)


def _below_thousand(n: int) -> list[str]:
    words = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
        if rest:
            words.append("and")
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens])
        if ones:
            words.append(_ONES[ones])
    elif rest or not hundreds:
        words.append(_ONES[rest])
    return words


def spell_number(n: int) -> str:
    """A whole number as words: ``1250`` -> ``"one thousand two hundred and fifty"``.

    Args:
        n (int): from ``-(10**15 - 1)`` to ``10**15 - 1``.

    Returns:
        str: lower-case words separated by single spaces.

    Raises:
        ValueError: ``n`` is out of range.
    """
    if abs(n) >= _MAX:
        raise ValueError(f"expected a number below {_MAX} in magnitude, got {n}")
    if n < 0:
        return "minus " + spell_number(-n)
    if n < 1000:
        return " ".join(_below_thousand(n))
    words = []
    for scale, name in _SCALES:
        count, n = divmod(n, scale)
        if count:
            words += _below_thousand(count) + [name]
    if n:
        if n < 100:
            words.append("and")  # "one thousand and five"
        words += _below_thousand(n)
    return " ".join(words)


def spell_ordinal(n: int) -> str:
    """An ordinal as words: ``22`` -> ``"twenty second"``, ``100`` -> ``"one hundredth"``."""
    words = spell_number(n).split()
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def spell_year(n: int) -> str:
    """A year as it is read: ``1948`` -> ``"nineteen forty eight"``, ``1900`` -> ``"nineteen
    hundred"``, ``1905`` -> ``"nineteen oh five"``; years 2000 to 2009 as cardinals."""
    if not 1000 <= n <= 9999:
        raise ValueError(f"expected a four-digit year, got {n}")
    if 2000 <= n <= 2009:
        return spell_number(n)
    century, rest = divmod(n, 100)
    if rest == 0:
        return f"{spell_number(century)} hundred"
    if rest < 10:
        return f"{spell_number(century)} oh {spell_number(rest)}"
    return f"{spell_number(century)} {spell_number(rest)}"


def _whole(digits: str) -> int:
    return int(digits.replace(",", ""))


def _money(match: re.Match) -> str:
    amount, cents = _whole(match["whole"]), match["cents"]
    words = f"{spell_number(amount)} dollar{'' if amount == 1 else 's'}"
    if cents and int(cents):
        words += f" {spell_number(int(cents))}"
    return f" {words} "


def _decimal(match: re.Match) -> str:
    fraction = " ".join(_ONES[int(d)] for d in match["fraction"])
    return f" {spell_number(_whole(match['whole']))} point {fraction} "


def _plain(match: re.Match) -> str:
    digits = match[0]
    n = _whole(digits)
    if "," not in digits and len(digits) == 4 and (1100 <= n <= 1999 or 2010 <= n <= 2099):
        return f" {spell_year(n)} "
    return f" {spell_number(n)} " if n < _MAX else digits


# A whole number: plain digits, or groups of three after commas ("1,000,000").
_WHOLE = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"
_RULES = (
    (re.compile(rf"\$(?P<whole>{_WHOLE})(?:\.(?P<cents>\d\d))?(?!\d)"), _money),
    (
        re.compile(rf"(?P<whole>{_WHOLE})(?:\.(?P<fraction>\d+))?\s?%"),
        lambda m: f" {_decimal(m) if m['fraction'] else spell_number(_whole(m['whole']))} percent ",
    ),
    (re.compile(rf"(?P<whole>{_WHOLE})(?:st|nd|rd|th)\b", re.IGNORECASE), lambda m: f" {spell_ordinal(_whole(m['whole']))} "),
    (re.compile(rf"(?P<whole>{_WHOLE})\.(?P<fraction>\d+)"), _decimal),
    (re.compile(_WHOLE), _plain),
)


def spell_numbers(text: str) -> str:
    """Replace every number written in digits by its words (readings in the module docstring).

    Args:
        text (str): any text.

    Returns:
        str: ``text`` with numbers spelled out; whitespace runs are collapsed to one space.
        Digits are left only in numbers of 16 or more digits.

    Example:
        >>> spell_numbers("In 1948 he paid $2.50 for 3 tickets, 10% off.")
        'In nineteen forty eight he paid two dollars fifty for three tickets, ten percent off.'
    """
    for pattern, spell in _RULES:
        text = pattern.sub(spell, text)
    return re.sub(r"\s+([,.;:!?])", r"\1", " ".join(text.split()))
