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


def build_page(out_dir: str | Path, metrics: dict, captions: list[dict], transcripts: list[dict], curves: dict[str, str]) -> Path:
    """Write ``out_dir/index.html``.

    Args:
        out_dir (str or Path): the demo folder; every path below is relative to it.
        metrics (dict): ``{"captioner": {...}, "recognizer": {...}}``.
        captions (list of dict): ``image``, ``caption``, ``references`` (list), ``overlay``.
        transcripts (list of dict): ``audio``, ``reference``, ``text``, ``alignment``, ``duration_s``.
        curves (dict): title -> PNG of training curves.

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
        overlay = f'<img class="overlay" src="{html.escape(item["overlay"])}" alt="attention overlay">' if item.get("overlay") else ""
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
