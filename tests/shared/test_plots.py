import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from PIL import Image

from shared.evaluation import plots
from shared.evaluation.plots import overlay_attention, save_alignment, save_caption_grid, save_curves


def _grey(height=48, width=64):
    return np.full((height, width, 3), 128, dtype=np.uint8)


def _assert_png(path):
    assert path.stat().st_size > 0
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width > 50 and image.height > 50


def test_overlay_keeps_image_shape_and_dtype():
    image = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    for weights in (np.random.rand(4, 6), torch.rand(4, 6)):
        out = overlay_attention(image, weights)
        assert out.shape == (48, 64, 3) and out.dtype == np.uint8


def test_overlay_accepts_pil_images():
    out = overlay_attention(Image.new("RGB", (40, 30), "gray"), np.random.rand(3, 3))
    assert out.shape == (30, 40, 3) and out.dtype == np.uint8


def test_overlay_changes_the_image_most_where_the_weight_peaks():
    image = _grey()
    weights = np.zeros((6, 8))
    weights[0, 0] = 1.0  # top-left corner
    change = np.abs(overlay_attention(image, weights).astype(int) - image).sum(axis=2)
    row, col = np.unravel_index(change.argmax(), change.shape)
    assert row < 48 // 4 and col < 64 // 4
    assert change[:12, :16].mean() > 10 * change[24:, 32:].mean()


def test_overlay_of_a_constant_map_leaves_the_image_unchanged():
    image = _grey()
    np.testing.assert_array_equal(overlay_attention(image, np.full((4, 4), 0.25)), image)


def test_overlay_rejects_bad_inputs():
    with pytest.raises(ValueError):
        overlay_attention(np.zeros((8, 8), dtype=np.uint8), np.ones((2, 2)))
    with pytest.raises(ValueError):
        overlay_attention(_grey(), np.ones(4))
    with pytest.raises(ValueError):
        overlay_attention(_grey(), np.ones((2, 2)), alpha=1.5)


def test_caption_grid_writes_a_png(tmp_path):
    words = ["a", "red", "circle", "<end>"]
    path = save_caption_grid(_grey(), words, torch.rand(4, 3, 3), tmp_path / "sub" / "grid.png")
    assert path == tmp_path / "sub" / "grid.png"
    _assert_png(path)


def test_caption_grid_needs_one_map_per_word(tmp_path):
    with pytest.raises(ValueError, match="one attention map per word"):
        save_caption_grid(_grey(), ["a", "b"], np.random.rand(3, 3, 3), tmp_path / "g.png")
    with pytest.raises(ValueError):
        save_caption_grid(_grey(), ["a"], np.random.rand(1, 9), tmp_path / "g.png")


def test_alignment_writes_a_png(tmp_path):
    path = save_alignment(np.random.rand(5, 40), tmp_path / "a.png", list("ab cd"), 0.04, "t")
    _assert_png(path)
    _assert_png(save_alignment(torch.rand(3, 10), tmp_path / "b.png"))


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")  # no CJK font here: boxes, as wide
@pytest.mark.parametrize(
    "name",
    ["recording_of_the_weekly_meeting_" * 5 + ".wav", "会議の録音" * 12 + ".wav", "W" * 150 + ".wav"],
    ids=["words", "cjk", "wide letters"],
)
def test_a_long_alignment_title_is_wrapped_to_fit_inside_the_figure(tmp_path, monkeypatch, name):
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or Path(path))
    title = f"{name}: the quick brown fox jumps over the lazy dog"  # as transcribe writes it
    save_alignment(np.random.rand(12, 40), tmp_path / "a.png", list("the quick br"), 0.04, title)
    (figure,) = figures
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # lays the figure out as savefig does
    (text,) = [t for t in figure.findobj(Text) if t.get_text().startswith(name[:10])]
    box, page = text.get_window_extent(canvas.get_renderer()), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    assert text.get_text().replace("\n", "").startswith(name[:60])  # wrapped, its start kept


def test_characters_the_font_lacks_are_drawn_without_a_warning_each(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _assert_png(save_alignment(np.random.rand(3, 10), tmp_path / "a.png", list("abc"), 0.04, "会議の録音.wav: abc"))
    assert [str(w.message) for w in caught] == []


def test_alignment_needs_one_label_per_output_step(tmp_path):
    with pytest.raises(ValueError, match="one label per output step"):
        save_alignment(np.random.rand(5, 40), tmp_path / "a.png", output_labels=list("abc"))
    with pytest.raises(ValueError):
        save_alignment(np.random.rand(5, 40), tmp_path / "a.png", frame_seconds=0.0)


def test_curves_write_a_png(tmp_path):
    series = {"train/loss": [(i, 1.0 / (i + 1)) for i in range(20)], "val/bleu4": [(10, 0.3)]}
    _assert_png(save_curves(series, tmp_path / "c.png", "curves"))


def test_curves_need_at_least_one_series(tmp_path):
    with pytest.raises(ValueError):
        save_curves({}, tmp_path / "c.png", "nothing")
