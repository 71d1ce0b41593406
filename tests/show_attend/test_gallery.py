"""The caption command's outputs for people: the gallery page (``--html``) and the progress bar.

The page is opened from disk in a real headless browser (Debian's ``chromium`` driven by
Selenium through ``chromium-driver``); without them that test fails, saying what to install.
The captioner is a tiny one fitted to a few shapes scenes for a few seconds.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from shared.io.model_files import export_folder
from show_attend.cli import main
from show_attend.data.dataset import collate
from show_attend.infer.caption import caption_files, load_captioner
from show_attend.train.datamodule import CaptionDataModule
from show_attend.train.module import CaptionerModule

BEAMS = 3


@pytest.fixture(scope="module")
def fitted(tiny_shapes, tmp_path_factory) -> tuple[Path, list[str]]:
    """A tiny captioner fitted to the 4 validation scenes for 60 steps, exported as a folder, and those scenes' files."""
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    torch.manual_seed(0)
    module = CaptionerModule(
        datamodule.vocabulary_tokens,
        encoder={"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
        decoder={"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
        image_size=32,
        decoding={"beam_size": BEAMS, "max_length": 12},
        doubly_stochastic=0.0,
    )
    scenes = datamodule.dataset("val")
    batch = collate([scenes[i] for i in range(4)])
    optimizer = torch.optim.Adam(module.parameters(), lr=3e-3)
    for _ in range(60):
        optimizer.zero_grad()
        module.loss(batch)[0].backward()
        optimizer.step()
    model = module.model.eval()
    hparams = {"vocabulary": model.vocabulary.to_dict()["tokens"], **model.config.to_dict(), "decoding": asdict(model.decoding)}
    folder = export_folder(tmp_path_factory.mktemp("gallery_model") / "model", "show-attend", model.state_dict(), hparams)
    return folder, [str(record.path) for record in scenes.records[:4]]


@pytest.fixture(scope="module")
def exported_captioner(fitted) -> Path:
    return fitted[0]


@pytest.fixture(scope="module")
def images(fitted) -> list[str]:
    return fitted[1]


@pytest.fixture(scope="module")
def gallery(exported_captioner, images, tmp_path_factory) -> Path:
    """The page ``caption --html`` writes for four images, with their --json lines beside it."""
    folder = tmp_path_factory.mktemp("gallery") / "page"
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", stdout)
        assert main(["caption", "--ckpt", str(exported_captioner), *images, "--html", str(folder), "--json"]) == 0
    (folder / "captions.jsonl").write_text(stdout.getvalue())
    return folder


def _attention_data(page: str) -> list[dict]:
    return json.loads(re.search(r'<script id="attention" type="application/json">(.*?)</script>', page, re.S).group(1))


def test_nbest_keeps_the_best_caption_and_ranks_the_others_below_it(exported_captioner, images):
    model = load_captioner(exported_captioner)
    alone = list(caption_files(model, images))
    with_others = list(caption_files(model, images, nbest=BEAMS))
    assert [r.tokens for r in with_others] == [r.tokens for r in alone]  # the best is the same
    for result in with_others:
        assert len(result.others) == BEAMS - 1
        scores = [result.score, *(beam.score for beam in result.others)]
        assert scores == sorted(scores, reverse=True)
        captions = [result.tokens, *(beam.tokens for beam in result.others)]
        assert len({tuple(c) for c in captions}) == BEAMS  # different captions, not copies of the best
        for beam in result.others:
            assert beam.attention.shape == (len(beam.tokens), 4, 4)


def test_the_page_holds_every_image_with_its_captions_and_each_words_attention(gallery, images):
    page = (gallery / "index.html").read_text()
    captions = [json.loads(line) for line in (gallery / "captions.jsonl").read_text().splitlines()]
    figures = re.findall(r"<figure .*?</figure>", page, re.S)
    assert len(figures) == len(images)
    data = _attention_data(page)
    for figure, item, caption in zip(figures, data, captions):
        assert caption["image"] in figure
        lines = re.findall(r"<li>(.*?)</li>", figure, re.S)
        assert len(lines) == len(item["beams"]) == BEAMS
        best = re.findall(r'<button class="word" data-beam="0" data-word="\d+">(.*?)</button>', lines[0])
        assert best == caption["tokens"]
        assert item["grid"] == [4, 4]
        for line, beam in zip(lines, item["beams"]):
            assert len(beam) == line.count('class="word"')  # one map per word
            assert all(len(levels) == 16 and 0 <= min(levels) and max(levels) <= 255 for levels in beam)
    # self-contained: images inline, no file or network address to fetch
    assert len(re.findall(r'<img src="data:image/jpeg;base64,', page)) == len(images)
    assert not re.search(r'(src|href)="(?!data:)', page)


def _browser():
    """A headless chromium under Selenium, or a one-line failure naming what to install."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the gallery test needs Selenium: .venv/bin/pip install -e '.[dev]'", pytrace=False)
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail("the gallery test needs a headless browser: apt-get install chromium chromium-driver", pytrace=False)
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(argument)
    options.binary_location = browser
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


# Installed before the page's own scripts run: every uncaught error and console.error is kept.
_CATCH_ERRORS = """
window.pageErrors = [];
window.addEventListener("error", (event) => window.pageErrors.push(String(event.message)));
const consoleError = console.error;
console.error = (...args) => { window.pageErrors.push(args.join(" ")); consoleError(...args); };
"""


@pytest.mark.slow
def test_choosing_a_word_in_a_browser_draws_its_attention_with_no_script_errors(gallery, images):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser = _browser()
    try:
        browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _CATCH_ERRORS})
        browser.get((gallery / "index.html").resolve().as_uri())
        figures = browser.find_elements(By.TAG_NAME, "figure")
        assert len(figures) == len(images)
        assert browser.execute_script("return [...document.images].every((image) => image.complete && image.naturalWidth > 0)")

        def picture(figure) -> str:
            return browser.execute_script("return arguments[0].querySelector('canvas').toDataURL()", figure)

        def words(figure, beam: int) -> list:
            return figure.find_elements(By.CSS_SELECTOR, f'.word[data-beam="{beam}"]')

        figure = next(
            f for f in figures if len(words(f, 0)) >= 2 and len(words(f, 1)) >= 2
        )  # a tiny model's caption may be empty
        untouched = next(f for f in figures if f != figure)
        blank = picture(figure)
        first, second = words(figure, 0)[:2]
        first.click()  # kept
        shown = picture(figure)
        assert shown != blank
        ActionChains(browser).move_to_element(second).perform()  # hovering shows another word
        assert picture(figure) not in (blank, shown)
        ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
        assert picture(figure) == shown  # the kept word again
        words(figure, 1)[-1].click()  # the last word of the beam's second caption (its first looks as the best's first does)
        assert picture(figure) not in (blank, shown)
        assert picture(untouched) == blank  # the other images are left as they were
        errors = browser.execute_script("return window.pageErrors")
        severe = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == [] and severe == []
    finally:
        browser.quit()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal, as_json, bar", [(True, False, True), (True, True, False), (False, False, False)])
def test_caption_shows_a_progress_bar_on_a_terminal_only(exported_captioner, images, monkeypatch, terminal, as_json, bar):
    stderr, stdout = (_Terminal() if terminal else io.StringIO()), io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["caption", "--ckpt", str(exported_captioner), *images, *(["--json"] if as_json else [])]) == 0
    assert ("4/4" in stderr.getvalue()) == bar
    if not bar:
        assert stderr.getvalue() == ""
    lines = stdout.getvalue().splitlines()
    assert len(lines) == len(images)  # the captions themselves are all on standard output, whole
    if as_json:
        assert all(json.loads(line)["image"] == image for line, image in zip(lines, images))


@pytest.mark.parametrize("option", ["--html", "--overlay-dir"])
def test_an_output_folder_that_cannot_be_written_is_one_line_before_the_model_loads(tmp_path, images, capsys, option):
    (tmp_path / "taken").write_text("a file, not a folder")
    for folder in (tmp_path / "taken", tmp_path / "taken" / "page"):
        code = main(["caption", "--ckpt", str(tmp_path / "no-such-model"), images[0], option, str(folder)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1
        assert f"{option} {folder}: not a folder that can be written" in err  # not the missing model: nothing was loaded


# ----------------------------------------------------------------------------- one inference interface (both apps alike)


def test_caption_json_gives_each_images_caption_score_and_beams_best_first(exported_captioner, images, capsys):
    assert main(["caption", "--ckpt", str(exported_captioner), "--device", "cpu", "--json", *images]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["image"] for line in lines] == images
    for line in lines:
        assert {"image", "caption", "text", "tokens", "score", "beams", "overlay"} <= set(line)
        assert line["text"] == line["caption"] == " ".join(line["tokens"])  # "text", as transcribe --json names it
        assert len(line["beams"]) == BEAMS  # the model's beam size
        assert line["beams"][0] == {"text": line["caption"], "tokens": line["tokens"], "score": line["score"]}
        scores = [beam["score"] for beam in line["beams"]]
        assert scores == sorted(scores, reverse=True) and scores[0] <= 0


def test_caption_beam_size_sets_the_beams_json_shows(exported_captioner, images, capsys):
    assert main(["caption", "--ckpt", str(exported_captioner), "--beam-size", "2", "--json", images[0]]) == 0
    assert len(json.loads(capsys.readouterr().out)["beams"]) == 2


def test_a_folder_stands_for_its_images_sorted_at_any_depth(exported_captioner, images, tmp_path, capsys):
    folder = tmp_path / "holiday"
    (folder / "b").mkdir(parents=True)
    copies = [folder / "b" / "z.png", folder / "a.PNG", folder / "b" / "c.png"]
    for image, copy in zip(images, copies):
        shutil.copy(image, copy)
    (folder / "notes.txt").write_text("not an image")
    assert main(["caption", "--ckpt", str(exported_captioner), "--json", str(folder)]) == 0
    assert [json.loads(line)["image"] for line in capsys.readouterr().out.splitlines()] == sorted(map(str, copies))


def test_a_folder_without_images_is_one_line_and_exit_2_before_the_model_loads(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not an image")
    code = main(["caption", "--ckpt", str(tmp_path / "no-such-model"), str(tmp_path / "empty")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{tmp_path / 'empty'}: a folder with no image files" in err  # not the missing model: nothing was loaded


def test_caption_without_ckpt_is_one_line_saying_no_captioner_ships(images, capsys):
    from show_attend.infer.caption import SHIPPED_MODEL

    assert not SHIPPED_MODEL.exists()  # models/ ships a recognizer only; if a captioner ships, caption should use it
    code = main(["caption", images[0]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "no captioner ships" in err and "--ckpt" in err


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--device", "cuda", "no CUDA GPU"),
        ("--device", "cuda:7", "no CUDA GPU"),
        ("--device", "banana", "expected cpu, cuda or cuda:N"),
        ("--beam-size", "0", "must be >= 1"),
        ("--max-length", "0", "must be >= 1"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it_before_the_model_loads(
    images, tmp_path, capsys, monkeypatch, option, value, expected
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a machine with a GPU
    code = main(["caption", "--ckpt", str(tmp_path / "no-such-model"), option, value, images[0]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{option} {value}" in err or f"{option} must" in err and value in err
    assert expected in err and "no-such-model" not in err


def test_captioning_gives_what_the_command_prints(exported_captioner, images, capsys):
    from show_attend import Captioning, CaptionResult

    captioning = Captioning.load(exported_captioner, device="cpu")
    results = captioning.caption(images)
    assert all(isinstance(result, CaptionResult) for result in results)
    assert main(["caption", "--ckpt", str(exported_captioner), *images]) == 0
    assert [f"{r.image}: {r.caption}" for r in results] == capsys.readouterr().out.splitlines()
    assert captioning.caption(images[0]).tokens == results[0].tokens  # one path, one result
    with_beams = captioning.caption(images, nbest=BEAMS)
    assert [r.tokens for r in with_beams] == [r.tokens for r in results] and all(len(r.beams) == BEAMS for r in with_beams)


def test_captioning_raises_for_an_unreadable_image_and_caption_many_goes_on(exported_captioner, images, tmp_path):
    from show_attend import Captioning
    from show_attend.data.images import ImageError

    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    captioning = Captioning.load(exported_captioner, beam_size=2)
    with pytest.raises(ImageError, match="bad.png"):
        captioning.caption([images[0], str(bad)])
    first, error, last = captioning.caption_many([images[0], str(bad), images[1]])
    assert isinstance(error, ImageError) and first.image == Path(images[0]) and last.image == Path(images[1])


def test_captioning_refuses_a_device_the_machine_lacks_before_loading(tmp_path, monkeypatch):
    from show_attend import Captioning

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device cuda: this machine has no CUDA GPU"):
        Captioning.load(tmp_path / "no-such-model", device="cuda")


def test_captioning_of_a_loaded_model_decodes_with_its_settings_less_those_replaced(exported_captioner, images):
    from show_attend import Captioning

    model = load_captioner(exported_captioner)
    captioning = Captioning(model, max_length=2, beam_size=None)  # None keeps the model's
    assert captioning.model is model and captioning.decoding == replace(model.decoding, max_length=2)
    assert [r.tokens for r in captioning.caption(images)] == [
        r.tokens for r in Captioning.load(exported_captioner, max_length=2).caption(images)
    ]
    assert all(len(r.tokens) <= 2 for r in captioning.caption(images))
    with pytest.raises(ValueError, match="unknown DecodeConfig settings \\['beams'\\]"):
        Captioning(model, beams=2)
    with pytest.raises(ValueError, match="--beam-size must be >= 1"):
        Captioning.load(exported_captioner, beam_size=0)
