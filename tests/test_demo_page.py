"""The demo's results page links only files that exist, with relative links."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from demo_page import build_page, highlight_errors, missing_links  # noqa: E402


def _touch(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path.name if path.parent.name == "" else f"{path.parent.name}/{path.name}"


def test_page_links_every_artifact_and_nothing_missing(tmp_path):
    captions = [{"image": _touch(tmp_path / "images/a.png"), "caption": "a red circle",
                 "references": ["A red circle.", "A small red circle."],
                 "overlay": _touch(tmp_path / "overlays/a.png")}]
    transcripts = [{"audio": _touch(tmp_path / "audio/u.wav"), "reference": "the cat sat", "text": "the hat sat",
                    "alignment": _touch(tmp_path / "alignments/u.png"), "duration_s": 1.5}]
    curves = {"captioner": _touch(tmp_path / "curves/captioner.png")}
    metrics = {"captioner": {"exact_match": 1.0, "train_seconds": 251.5}, "recognizer": {"cer": 0.05, "wer": None}}
    page = build_page(tmp_path, metrics, captions, transcripts, curves)
    text = page.read_text()
    assert missing_links(page) == []
    for link in ("images/a.png", "overlays/a.png", "audio/u.wav", "alignments/u.png", "curves/captioner.png"):
        assert f'src="{link}"' in text
    assert "<audio controls" in text and "0.050" in text and "252 s" in text
    assert "exact match" in text and "A small red circle." in text

    (tmp_path / "overlays/a.png").unlink()
    assert missing_links(page) == ["overlays/a.png"]


def test_absolute_links_count_as_missing(tmp_path):
    page = tmp_path / "index.html"
    page.write_text(f'<img src="{tmp_path}/x.png"><a href="https://example.org">x</a>')
    assert len(missing_links(page)) == 2


def test_transcript_errors_are_highlighted():
    marked = highlight_errors("the black cat sat down", "the back cat sat down now")
    assert '<span class="sub" title="reference: black">back</span>' in marked
    assert "<ins>now</ins>" in marked
    assert "<del>" in highlight_errors("a b c", "a c")


def test_a_caption_is_marked_exact_only_when_it_equals_a_reference(tmp_path):
    def page_for(caption):
        item = {"image": "a.png", "caption": caption, "references": ["A red circle.", "A small red circle."], "overlay": None}
        return build_page(tmp_path, {}, [item], [], {}).read_text()

    assert "&#10003; exact match" in page_for("a small red circle")
    assert "differs from every reference" in page_for("a big red circle")
