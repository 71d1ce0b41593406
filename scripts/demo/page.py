"""The demo's results page: one self-contained HTML file with relative links only.

``build_page`` takes what the demo produced (metrics, captioned images, transcribed files,
training curves) and writes ``index.html`` beside them; ``missing_links`` lists every linked
file that does not exist, so a test can check the page is whole.
"""

from __future__ import annotations

import difflib
import html
import re
from pathlib import Path

__all__ = ["build_page", "highlight_errors", "missing_links"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.3rem; margin-top: 2.5rem; }
.metrics { border-collapse: collapse; } .metrics td, .metrics th { padding: 0.3rem 0.9rem; border: 1px solid #ddd; }
.item { border: 1px solid #e3e3e3; border-radius: 6px; padding: 0.8rem; margin: 1rem 0; }
.item img.overlay { width: 100%; } .item img.alignment { width: 100%; max-width: 760px; } .ok { color: #060; } .miss { color: #a00; } .item img.thumb { width: 128px; image-rendering: pixelated; }
.row { display: flex; gap: 1rem; align-items: flex-start; } .label { color: #777; width: 7rem; flex: none; }
del { background: #fdd; color: #a00; } ins { background: #dfd; color: #060; text-decoration: none; }
.sub { background: #ffe9b3; } .small { color: #777; font-size: 0.9rem; }
"""


def highlight_errors(reference: str, hypothesis: str) -> str:
    """HTML of the hypothesis with word errors marked against the reference.

    Substituted words are highlighted, inserted words are green, and deleted reference words
    are shown struck through in red.
    """
    ref, hyp = reference.split(), hypothesis.split()
    parts: list[str] = []
    for op, r0, r1, h0, h1 in difflib.SequenceMatcher(a=ref, b=hyp, autojunk=False).get_opcodes():
        said = html.escape(" ".join(hyp[h0:h1]))
        missed = html.escape(" ".join(ref[r0:r1]))
        if op == "equal":
            parts.append(said)
        elif op == "replace":
            parts.append(f'<span class="sub" title="reference: {missed}">{said}</span>')
        elif op == "insert":
            parts.append(f"<ins>{said}</ins>")
        else:
            parts.append(f"<del>{missed}</del>")
    return " ".join(parts)


def _words(text: str) -> list[str]:
    return "".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split()


def _match_mark(item: dict) -> str:
    """A tick when the caption equals one of the references word for word (what exact match counts)."""
    if any(_words(item["caption"]) == _words(r) for r in item["references"]):
        return ' <span class="ok" title="equals a reference word for word">&#10003; exact match</span>'
    return ' <span class="miss">differs from every reference</span>'


def _metric_rows(metrics: dict) -> str:
    rows = []
    for app, values in metrics.items():
        for name, value in values.items():
            if value is None:
                shown = "n/a"
            elif name.endswith("_seconds"):
                shown = f"{float(value):.0f} s"
            else:
                shown = f"{value:.3f}" if isinstance(value, float) else html.escape(str(value))
            rows.append(f"<tr><td>{html.escape(app)}</td><td>{html.escape(name)}</td><td>{shown}</td></tr>")
    return "\n".join(rows)


def _explain_section(explain: dict) -> list[str]:
    """What attention buys and what its weights do not prove: the explain summary and examples."""
    summary = explain["summary"]
    body = [
        "<h2>Attention against occlusion: what the weights do not prove</h2>",
        '<p class="small">For each word of the captioner\'s own caption: where it looked (attention) beside '
        "what the word depended on (occlusion: how far the word's log-probability falls when one cell of the "
        f"feature grid is replaced by the image's mean feature). Over {summary['words']} words of "
        f"{summary['images']} test images (<code>show-attend explain</code>): the attention peak was among the "
        f"3 most decisive cells for {summary['peak_in_top3']:.0%} of the words, the two peaks were different cells "
        f"for {summary['peaks_differ']:.0%}, the mean rank correlation of the two maps was {summary['rank_correlation']:.2f}, "
        f"and removing the attention peak lowered the word's log-probability by {summary['drop_at_attention_peak']:.3f} "
        f"on average, against {summary['drop_at_random']:.3f} for a random cell.</p>",
    ]
    for title, items in (("Where they disagree most", explain["disagree"]), ("Where they agree", explain["agree"])):
        body.append(f"<h3>{html.escape(title)}</h3>")
        for item in items:
            body.append(
                f'<div class="item"><div class="row"><span class="label">caption</span><b>{html.escape(item["caption"])}</b></div>'
                f'<div class="small">mean rank correlation {item["rank_correlation"]:.2f}; attention peak among the 3 most '
                f"decisive cells for {item['in_top3']} of {item['words']} words</div>"
                f'<img class="overlay" src="{html.escape(item["png"])}" alt="attention and occlusion"></div>'
            )
    return body


def _bottleneck_section(bottleneck: dict) -> list[str]:
    body = ["<h2>What attention buys: attention against one fixed vector</h2>"]
    if not bottleneck.get("plots"):
        return body + [
            f'<p class="small">Not run yet: <code>{html.escape(bottleneck["command"])}</code> trains both '
            "apps with and without attention and plots their scores against input length (about 10 minutes "
            "with --quick on 2 CPU cores); this page then shows the plots.</p>"
        ]
    body.append(
        f'<p class="small">From <code>{html.escape(bottleneck["command"])}</code>: the same model and budget, '
        "one reading every position through attention, one reading their mean.</p>"
    )
    return body + [f'<img class="alignment" src="{html.escape(path)}" alt="bottleneck plot">' for path in bottleneck["plots"]]


def _failure_section(failures: dict) -> list[str]:
    identical, longer, mask = failures["identical"], failures["longer"], failures["wrong_mask"]
    shares = ", ".join(f"{w['word']}: {w['on_first']:.2f} / {w['on_second']:.2f}" for w in identical["words"])
    body = [
        "<h2>Three failure modes, reproduced</h2>",
        "<h3>Two identical objects</h3>",
        f"<p>caption: <b>{html.escape(identical['caption'])}</b> (reference: {html.escape(identical['reference'])})</p>",
        f'<p class="small">attention mass on the first / second object for the words naming them: {html.escape(shares)}</p>',
        f'<img class="overlay" src="{html.escape(identical["image"])}" alt="two identical objects">',
        "<h3>Longer than training: six objects (training had one to four)</h3>",
        f'<p>caption: <b>{html.escape(longer["caption"])}</b><br><span class="small">reference: {html.escape(longer["reference"])}</span></p>',
        f'<img class="overlay" src="{html.escape(longer["image"])}" alt="six objects">',
        "<h3>A dropped padding mask</h3>",
        f'<p class="small">A {mask["seconds"]} s utterance padded to {mask["padded_to_seconds"]} s in one batch. Reference: '
        f"{html.escape(mask['reference'])}</p>",
    ]
    for name, label in (("mask_right", "with its mask"), ("mask_dropped", "mask dropped")):
        result = mask[name]
        body.append(
            f'<p>{label}: <b>{html.escape(result["text"])}</b> <span class="small">(CER {result["cer"]:.2f}; '
            f"{result['attention_on_padding']:.0%} of the attention on padding)</span></p>"
        )
        if result.get("image"):
            body.append(f'<img class="alignment" src="{html.escape(result["image"])}" alt="{label}">')
    return body


def build_page(
    out_dir: str | Path,
    metrics: dict,
    captions: list[dict],
    transcripts: list[dict],
    curves: dict[str, str],
    explain: dict | None = None,
    bottleneck: dict | None = None,
    failures: dict | None = None,
) -> Path:
    """Write ``out_dir/index.html``.

    Args:
        out_dir (str or Path): the demo folder; every path below is relative to it.
        metrics (dict): ``{"captioner": {...}, "recognizer": {...}}``.
        captions (list of dict): ``image``, ``caption``, ``references`` (list), ``overlay``.
        transcripts (list of dict): ``audio``, ``reference``, ``text``, ``alignment``, ``duration_s``.
        curves (dict): title -> PNG of training curves.
        explain (dict or None): ``summary`` (numbers) and the ``disagree`` and ``agree`` examples
            (``caption``, ``png``, ``rank_correlation``, ``in_top3``, ``words``).
        bottleneck (dict or None): ``command`` and ``plots`` (PNGs; empty when not run yet).
        failures (dict or None): what ``scripts/demo/failure_modes.py`` wrote.

    Returns:
        Path: the page.
    """
    out_dir = Path(out_dir)
    body = [
        "<h1>attend: what the demo learned</h1>",
        '<p class="small">Both models were trained from scratch on built-in data on this machine. '
        "Captions are decoded with beam search on held-out images; transcripts come from voices "
        "the recognizer never heard in training.</p>",
        "<h2>Metrics</h2>",
        f'<table class="metrics"><tr><th>app</th><th>metric</th><th>value</th></tr>{_metric_rows(metrics)}</table>',
        "<h2>Captioner: where the model looked for each word</h2>",
    ]
    for item in captions:
        overlay = (
            f'<img class="overlay" src="{html.escape(item["overlay"])}" alt="attention overlay">' if item.get("overlay") else ""
        )
        body.append(
            '<div class="item"><div class="row">'
            f'<img class="thumb" src="{html.escape(item["image"])}" alt="test image">'
            f'<div><div class="row"><span class="label">caption</span><b>{html.escape(item["caption"])}</b>{_match_mark(item)}</div>'
            + "".join(f'<div class="row"><span class="label">reference</span>{html.escape(r)}</div>' for r in item["references"])
            + "</div>"
            f"</div>{overlay}</div>"
        )
    body.append("<h2>Recognizer: transcripts and attention alignments</h2>")
    for item in transcripts:
        alignment = (
            f'<img class="alignment" src="{html.escape(item["alignment"])}" alt="alignment">' if item.get("alignment") else ""
        )
        body.append(
            '<div class="item">'
            f'<audio controls preload="none" src="{html.escape(item["audio"])}"></audio> '
            f'<span class="small">{item.get("duration_s", 0):.1f} s</span>'
            f'<div class="row"><span class="label">reference</span>{html.escape(item["reference"])}</div>'
            f'<div class="row"><span class="label">transcript</span>{highlight_errors(item["reference"], item["text"])}</div>'
            f"{alignment}</div>"
        )
    if explain:
        body += _explain_section(explain)
    if bottleneck:
        body += _bottleneck_section(bottleneck)
    if failures:
        body += _failure_section(failures)
    body.append("<h2>Training curves</h2>")
    for title, path in curves.items():
        body.append(f'<h3>{html.escape(title)}</h3><img class="alignment" src="{html.escape(path)}" alt="{html.escape(title)}">')
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>attend demo</title>'
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def missing_links(page: str | Path) -> list[str]:
    """Links (``src``/``href``) of ``page`` that are absolute or point to no file."""
    page = Path(page)
    links = re.findall(r'(?:src|href)="([^"]+)"', page.read_text(encoding="utf-8"))
    return [
        link
        for link in links
        if link.startswith(("/", "http:", "https:", "file:")) or not (page.parent / html.unescape(link)).is_file()
    ]
