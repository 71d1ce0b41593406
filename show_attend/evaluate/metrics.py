"""Caption metrics, computed the way published numbers are computed.

They follow the COCO caption evaluation code (pycocoevalcap; Chen et al. 2015,
arXiv 1504.00325), which is what produced the numbers in Show, Attend and Tell and later
papers, so that our numbers can be compared with theirs:

- BLEU-1..4 (Papineni et al. 2002): one corpus score, "closest" reference length.
- ROUGE-L (Lin 2004): LCS F-measure with beta = 1.2, averaged over images.
- CIDEr-D (Vedantam et al. 2015): tf-idf n-grams (n = 1..4), clipped, Gaussian length
  penalty (sigma = 6), x10, document frequencies from the evaluated set's references.
- METEOR 1.5 (Denkowski and Lavie 2014): only through its Java jar, so only when Java and the
  jar are there; otherwise it is reported as ``None``.

nltk's ``corpus_bleu`` gives different numbers (other tokenisation and smoothing): do not mix them.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
import threading
import warnings
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "METEOR_JAR_ENV",
    "tokenize_caption",
    "corpus_bleu",
    "rouge_l",
    "cider_d",
    "find_meteor_jar",
    "meteor_score",
    "caption_metrics",
    "exact_match",
]

Tokens = Sequence[str]

# ---------------------------------------------------------------------------------------------
# Tokenisation
# ---------------------------------------------------------------------------------------------

# The COCO pipeline lower-cases *before* it drops its punctuation list, so the PTB bracket
# tokens (-LRB- ...) survive as "-lrb-" in COCO-evaluated numbers; we reproduce that.
_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}
# Tokens the COCO evaluation removes after PTB tokenisation (its PUNCTUATIONS list).
_DROPPED = {"''", "'", "``", "`", ".", "?", "!", ",", ":", "-", "--", "...", ";"}
# Abbreviations whose final period PTB keeps as part of the word.
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc"}
_CLITICS = ("n't", "'s", "'re", "'ve", "'ll", "'d", "'m")


def _split_token(token: str) -> list[str]:
    """PTB treatment of one whitespace-free chunk: periods, clitics, stray apostrophes."""
    if token.endswith("."):
        core = token.rstrip(".")
        # "u.s." and "mr." keep their period; a sentence-final period is split off (and dropped).
        token = core + "." if core and ("." in core or core in _ABBREVIATIONS) else core
    if token in _CLITICS:  # already split (keeps the tokenizer idempotent)
        return [token]
    for clitic in _CLITICS:
        if token.endswith(clitic) and len(token) > len(clitic):
            return [*_split_token(token[: -len(clitic)]), clitic]  # "can't" -> "ca", "n't"
    return [token.strip("'")]  # quotes around words and the plural possessive "dogs'"


def tokenize_caption(text: str) -> list[str]:
    """Tokenise a caption like the COCO evaluation's PTB tokenizer, in pure Python.

    The COCO code runs Stanford's ``PTBTokenizer -lowerCase`` (Java) and then removes
    punctuation tokens. This is an approximation that agrees with it on plain English:
    lower-cases; removes ``. , ; : ! ? -- ...`` and quotes; splits clitics (``man's`` ->
    ``man 's``, ``can't`` -> ``ca n't``); keeps hyphenated words, numbers such as ``3.5``,
    ``1,000`` or ``3:30`` and abbreviations such as ``u.s.`` whole; splits off ``$ % #`` as
    tokens; and writes brackets as ``-lrb- -rrb- -lsb- -rsb- -lcb- -rcb-``, as the COCO code
    does. It does not reproduce PTB's rarer rules (its full abbreviation list, ``'n'``,
    ``'90s``, URLs, unicode normalisation), so text full of such cases can differ slightly.

    Args:
        text (str): a raw caption.

    Returns:
        list[str]: the tokens; ``" ".join(tokens)`` is what the COCO scorers read, and
        tokenising that string again gives the same tokens.
    """
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    text = re.sub(r"[()\[\]{}]", lambda m: f" {_BRACKETS[m.group()]} ", text)
    text = re.sub(r"[\"`\u201c\u201d]|--+|[!?;]", " ", text)  # tokens COCO drops anyway
    text = re.sub(r"(?<!\d)[,:]|[,:](?!\d)", " ", text)  # but "1,000" and "3:30" stay whole
    text = re.sub(r"([$#%])", r" \1 ", text)
    tokens = (piece for chunk in text.split() for piece in _split_token(chunk))
    return [token for token in tokens if token and token not in _DROPPED]


# ---------------------------------------------------------------------------------------------
# Caption metrics on tokenised captions: hypotheses[i] is scored against references[i].
# ---------------------------------------------------------------------------------------------

# pycocoevalcap's guards: TINY keeps a zero match count (almost) zero, SMALL avoids dividing
# by zero. They show: with no 4-gram match in the corpus BLEU-4 is tiny, yet not exactly 0.
_BLEU_TINY = 1e-15
_BLEU_SMALL = 1e-9


def _ngram_counts(tokens: Tokens, max_n: int) -> Counter:
    """Counts of every n-gram (as a tuple) of ``tokens`` for n = 1..max_n."""
    return Counter(tuple(tokens[i : i + n]) for n in range(1, max_n + 1) for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses: Sequence[Tokens], references: Sequence[Sequence[Tokens]], max_n: int = 4) -> list[float]:
    """Corpus BLEU-1..max_n exactly as pycocoevalcap's ``Bleu`` (option "closest").

    Clipped n-gram matches and n-gram totals are summed over the corpus; the effective
    reference length is, per hypothesis, the reference length closest to it (the shorter one
    on a tie); one brevity penalty is applied to the corpus.

    Args:
        hypotheses (Sequence[Sequence[str]]): one tokenised hypothesis per image.
        references (Sequence[Sequence[Sequence[str]]]): the tokenised references of each image.
        max_n (int, optional): longest n-gram. (Default: ``4``)

    Returns:
        list[float]: ``[BLEU-1, ..., BLEU-max_n]`` on a 0..1 scale.
    """
    matched, total = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, refs in zip(hypotheses, references, strict=True):
        max_ref_counts = Counter()
        for ref in refs:
            max_ref_counts |= _ngram_counts(ref, max_n)  # | keeps the larger count: clipping
        for gram, count in _ngram_counts(hyp, max_n).items():
            matched[len(gram) - 1] += min(count, max_ref_counts[gram])
        for n in range(max_n):
            total[n] += max(0, len(hyp) - n)
        hyp_len += len(hyp)
        ref_len += min((abs(len(ref) - len(hyp)), len(ref)) for ref in refs)[1]

    scores, product = [], 1.0
    for n in range(max_n):
        # Geometric mean of the precisions 1..n, taken the way the COCO code does (product, root).
        product *= (matched[n] + _BLEU_TINY) / (total[n] + _BLEU_SMALL)
        scores.append(product ** (1.0 / (n + 1)))
    ratio = (hyp_len + _BLEU_TINY) / (ref_len + _BLEU_SMALL)
    if ratio < 1:  # brevity penalty, Papineni et al. eq. 1
        scores = [score * math.exp(1 - 1 / ratio) for score in scores]
    return scores


def _lcs_length(a: Tokens, b: Tokens) -> int:
    """Length of the longest common subsequence of two token sequences (one DP row)."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(hypotheses: Sequence[Tokens], references: Sequence[Sequence[Tokens]], beta: float = 1.2) -> float:
    """ROUGE-L as pycocoevalcap's ``Rouge``: mean over images of an LCS F-measure.

    Per image, precision and recall are each the maximum over its references, then combined
    as ``(1 + beta^2) P R / (R + beta^2 P)``; an empty hypothesis scores 0.

    Args:
        hypotheses (Sequence[Sequence[str]]): one tokenised hypothesis per image.
        references (Sequence[Sequence[Sequence[str]]]): the tokenised references of each image.
        beta (float, optional): weight of recall over precision. (Default: ``1.2``)

    Returns:
        float: ROUGE-L on a 0..1 scale.
    """
    scores = []
    for hyp, refs in zip(hypotheses, references, strict=True):
        lcs = [_lcs_length(hyp, ref) for ref in refs]
        precision = max(common / len(hyp) if hyp else 0.0 for common in lcs)
        recall = max(common / len(ref) if ref else 0.0 for common, ref in zip(lcs, refs))
        if precision == 0 or recall == 0:
            scores.append(0.0)
        else:
            scores.append((1 + beta**2) * precision * recall / (recall + beta**2 * precision))
    return sum(scores) / len(scores)


def cider_d(
    hypotheses: Sequence[Tokens],
    references: Sequence[Sequence[Tokens]],
    sigma: float = 6.0,
    max_n: int = 4,
) -> float:
    """CIDEr-D as pycocoevalcap's ``Cider`` (Vedantam et al. 2015).

    Each caption becomes one tf-idf vector per n; idf uses document frequencies counted over
    the references of the images being evaluated (an image counts once per n-gram) and
    ``log(number of images)``. Per n, the hypothesis is compared with each reference by a
    cosine in which hypothesis weights are clipped by the reference's, times a Gaussian
    penalty on the length difference; the result is averaged over n and references, x10.
    Because idf is computed from the evaluated set, a single image always scores 0 and the
    score of an image depends on the others in the set.

    Args:
        hypotheses (Sequence[Sequence[str]]): one tokenised hypothesis per image.
        references (Sequence[Sequence[Sequence[str]]]): the tokenised references of each image.
        sigma (float, optional): width of the length penalty. (Default: ``6.0``)
        max_n (int, optional): longest n-gram. (Default: ``4``)

    Returns:
        float: CIDEr-D, mean over images (about 0..10; 1.0 on COCO is a good model).
    """
    ref_counts = [[_ngram_counts(ref, max_n) for ref in refs] for refs in references]
    doc_freq = Counter()
    for counts in ref_counts:
        doc_freq.update(set().union(*counts))
    log_images = math.log(len(references))

    def tfidf(counts: Counter) -> tuple[list[dict], list[float]]:
        vectors = [{} for _ in range(max_n)]
        for gram, tf in counts.items():
            # An n-gram no reference contains gets df = 1, the largest idf, as in the COCO code.
            vectors[len(gram) - 1][gram] = tf * (log_images - math.log(max(1.0, doc_freq[gram])))
        norms = [math.sqrt(sum(w * w for w in vec.values())) for vec in vectors]
        return vectors, norms

    def length(tokens: Tokens) -> int:
        # The COCO code measures length in bigrams; differences equal token-count differences
        # unless a caption is empty.
        return max(len(tokens) - 1, 0)

    scores = []
    for hyp, refs, counts in zip(hypotheses, references, ref_counts, strict=True):
        hyp_vecs, hyp_norms = tfidf(_ngram_counts(hyp, max_n))
        per_n = [0.0] * max_n
        for ref, ref_count in zip(refs, counts):
            ref_vecs, ref_norms = tfidf(ref_count)
            penalty = math.exp(-((length(hyp) - length(ref)) ** 2) / (2 * sigma**2))
            for n in range(max_n):
                ref_weight = [ref_vecs[n].get(gram, 0.0) for gram in hyp_vecs[n]]
                # "-D": clip the hypothesis weight by the reference's so repeats are not rewarded.
                dot = sum(min(w, r) * r for w, r in zip(hyp_vecs[n].values(), ref_weight))
                if hyp_norms[n] and ref_norms[n]:
                    per_n[n] += dot / (hyp_norms[n] * ref_norms[n]) * penalty
        scores.append(10.0 * sum(per_n) / max_n / len(refs))
    return sum(scores) / len(scores)


# ---------------------------------------------------------------------------------------------
# METEOR (Java)
# ---------------------------------------------------------------------------------------------

METEOR_JAR_ENV = "ATTEND_METEOR_JAR"


def find_meteor_jar() -> Path | None:
    """Where the METEOR 1.5 jar is, or ``None``.

    If the environment variable ``ATTEND_METEOR_JAR`` is set, it alone decides: a path to the
    jar, or an empty string to turn METEOR off. Otherwise the jar bundled with an installed
    ``pycocoevalcap`` package is used. METEOR also reads ``data/paraphrase-en.gz`` next to
    the jar, as laid out in that package.
    """
    if METEOR_JAR_ENV in os.environ:
        value = os.environ[METEOR_JAR_ENV]
        if not value:
            return None
        jar = Path(value).expanduser()
        if not jar.is_file():
            _warn_once(f"{METEOR_JAR_ENV}={value} is not a file; METEOR is unavailable and reported as None.")
            return None
        return jar
    spec = importlib.util.find_spec("pycocoevalcap")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        jar = Path(folder) / "meteor" / "meteor-1.5.jar"
        if jar.is_file():
            return jar
    return None


_warned: set[str] = set()  # METEOR warnings already given in this process


def _warn_once(message: str) -> None:
    """Warn about what METEOR lacks once per process, not at every validation."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _warn_missing(java: bool, jar: bool) -> None:
    """Say (once) that METEOR cannot run, naming what is missing: Java, the jar, or both."""
    missing = []
    if java:
        missing.append("Java (no `java` on PATH)")
    if jar:
        missing.append(f"the METEOR 1.5 jar (set {METEOR_JAR_ENV} to meteor-1.5.jar, or install pycocoevalcap)")
    if missing:
        _warn_once(f"METEOR needs {' and '.join(missing)}; it is reported as None.")


def _meteor_text(tokens: Tokens) -> str:
    # "|||" separates fields in METEOR's stdio protocol, so it must not occur inside a caption.
    return " ".join(" ".join(tokens).replace("|||", " ").split())


def _meteor_exchange(process: subprocess.Popen, line: str) -> str:
    process.stdin.write(line + "\n")
    process.stdin.flush()
    reply = process.stdout.readline()
    if not reply:
        raise ValueError("the METEOR process exited without answering")
    return reply.strip()


def meteor_score(
    hypotheses: Sequence[Tokens],
    references: Sequence[Sequence[Tokens]],
    jar: str | Path | None = None,
    timeout: float = 1800.0,
) -> float | None:
    """METEOR 1.5 as pycocoevalcap's ``Meteor``, or ``None`` where it cannot be computed.

    Runs ``java -jar meteor-1.5.jar - - -stdio -l en -norm``: one ``SCORE`` line per image
    gives its statistics, one ``EVAL`` line over all of them gives the corpus score. Starting
    the JVM and loading the paraphrase table takes several seconds.

    Args:
        hypotheses (Sequence[Sequence[str]]): one tokenised hypothesis per image.
        references (Sequence[Sequence[Sequence[str]]]): the tokenised references of each image.
        jar (str or Path or None, optional): the METEOR jar; ``None`` looks it up with
            :func:`find_meteor_jar`. (Default: ``None``)
        timeout (float, optional): seconds after which a stuck METEOR process is killed and
            ``None`` returned. (Default: ``1800``)

    Returns:
        float or None: METEOR on a 0..1 scale; ``None`` when Java or the jar is missing (with a
        warning, once per process, naming what is missing; none when an empty
        ``ATTEND_METEOR_JAR`` turned METEOR off) or the process fails (with a warning). It never
        raises.
    """
    turned_off = jar is None and os.environ.get(METEOR_JAR_ENV) == ""
    jar = Path(jar) if jar is not None else find_meteor_jar()
    java = shutil.which("java")
    if jar is None or java is None:
        if not turned_off:  # a wrong ATTEND_METEOR_JAR was named by find_meteor_jar already
            _warn_missing(java=java is None, jar=jar is None and METEOR_JAR_ENV not in os.environ)
        return None
    command = [java, "-Xmx2G", "-jar", str(jar), "-", "-", "-stdio", "-l", "en", "-norm"]
    try:
        with subprocess.Popen(
            command,
            cwd=jar.parent,  # METEOR finds data/paraphrase-en.gz relative to here
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as process:
            # A stuck JVM would block readline() for ever; killing it turns that into EOF.
            watchdog = threading.Timer(timeout, process.kill)
            watchdog.start()
            try:
                stats = []
                for hyp, refs in zip(hypotheses, references, strict=True):
                    fields = ["SCORE", *(_meteor_text(ref) for ref in refs), _meteor_text(hyp)]
                    stats.append(_meteor_exchange(process, " ||| ".join(fields)))
                process.stdin.write(" ||| ".join(["EVAL", *stats]) + "\n")
                process.stdin.flush()
                for _ in stats:
                    process.stdout.readline()  # one score per image, then the corpus score
                return float(process.stdout.readline())
            finally:
                watchdog.cancel()
                process.kill()
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        warnings.warn(f"METEOR failed ({error}); reporting it as unavailable.", stacklevel=2)
        return None


# ---------------------------------------------------------------------------------------------
# Entry points on raw captions
# ---------------------------------------------------------------------------------------------


def _tokenise_pairs(
    hypotheses: Mapping[Hashable, str], references: Mapping[Hashable, Sequence[str]]
) -> tuple[list[list[str]], list[list[list[str]]]]:
    """Check that both mappings describe the same images and tokenise them, aligned by key."""
    if not isinstance(hypotheses, Mapping) or not isinstance(references, Mapping):
        raise ValueError("hypotheses and references must be dicts keyed by image id.")
    if not hypotheses:
        raise ValueError("there are no hypotheses to score; expected at least one image.")
    if hypotheses.keys() != references.keys():
        missing = [k for k in hypotheses if k not in references][:5]
        extra = [k for k in references if k not in hypotheses][:5]
        raise ValueError(
            f"hypotheses and references must have the same keys; without references: {missing}, without a hypothesis: {extra}."
        )
    hyps, refs = [], []
    for key, hypothesis in hypotheses.items():
        captions = references[key]
        if not isinstance(hypothesis, str):
            kind = type(hypothesis).__name__
            raise ValueError(f"hypotheses[{key!r}] must be a string, got {kind}.")
        if isinstance(captions, str) or not isinstance(captions, Sequence):
            kind = type(captions).__name__
            raise ValueError(f"references[{key!r}] must be a list of strings, got {kind}.")
        if not captions:
            raise ValueError(f"references[{key!r}] is empty; every image needs at least one reference.")
        tokenised = [tokenize_caption(caption) for caption in captions]
        if not all(tokenised):
            raise ValueError(f"references[{key!r}] contains a caption with no words.")
        hyps.append(tokenize_caption(hypothesis))
        refs.append(tokenised)
    return hyps, refs


def caption_metrics(
    hypotheses: Mapping[Hashable, str],
    references: Mapping[Hashable, Sequence[str]],
    meteor: bool = True,
) -> dict[str, float | None]:
    """The COCO caption metrics of a set of captions, one call.

    Every caption goes through :func:`tokenize_caption` first, as the COCO code tokenises
    before scoring. An empty hypothesis is allowed and scores 0 for its image.

    Args:
        hypotheses (dict[key, str]): one generated caption per image id.
        references (dict[key, list[str]]): the reference captions of each image id; the keys
            must be the same as those of ``hypotheses``.
        meteor (bool, optional): try METEOR (seconds of JVM start-up); ``False`` reports it
            as ``None`` without trying. (Default: ``True``)

    Returns:
        dict[str, float or None]: ``bleu1``, ``bleu2``, ``bleu3``, ``bleu4``, ``rouge_l`` and
        ``meteor`` on a 0..1 scale, ``cider`` (CIDEr-D) on its natural scale; ``meteor`` is
        ``None`` when METEOR is unavailable.

    Raises:
        ValueError: when the keys differ, there are no images, or an image has no reference
        (or a reference with no words).
    """
    hyps, refs = _tokenise_pairs(hypotheses, references)
    bleu = corpus_bleu(hyps, refs)
    return {
        "bleu1": bleu[0],
        "bleu2": bleu[1],
        "bleu3": bleu[2],
        "bleu4": bleu[3],
        "rouge_l": rouge_l(hyps, refs),
        "cider": cider_d(hyps, refs),
        "meteor": meteor_score(hyps, refs) if meteor else None,
    }


def exact_match(hypotheses: Mapping[Hashable, str], references: Mapping[Hashable, Sequence[str]]) -> float:
    """Fraction of images whose tokenised hypothesis equals one of their tokenised references.

    Args:
        hypotheses (dict[key, str]): one generated caption per image id.
        references (dict[key, list[str]]): the reference captions of each image id.

    Returns:
        float: in 0..1.

    Raises:
        ValueError: as :func:`caption_metrics`.
    """
    hyps, refs = _tokenise_pairs(hypotheses, references)
    return sum(hyp in options for hyp, options in zip(hyps, refs)) / len(hyps)
