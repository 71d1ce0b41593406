"""The weights' moving average (``averaging.decay``): what it holds, what is scored and saved, resume;
and the soup of several runs (``uniform_soup``, ``scripts/experiments/average_models.py``).

The recognizer's fit and export with it: ``tests/speech_attend/test_recognizer_cli.py``."""

import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from scripts.experiments import average_models
from shared.io.model_files import export_folder, load_model_files
from shared.training.averaging import TRAINED_STATE, WeightAverage, uniform_soup


class Line(pl.LightningModule):
    """A linear model fitted with plain SGD; it records its weights after each step and at validation."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(3, 1)
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))  # a counter: never averaged
        self.after_step: list[torch.Tensor] = []
        self.validated: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen += 1
        return ((self.layer(x) - y) ** 2).mean()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.after_step.append(self.layer.weight.detach().clone())

    def validation_step(self, batch, batch_idx):
        self.validated.append(self.layer.weight.detach().clone())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(8, 3, generator=generator)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    return torch.utils.data.DataLoader(data, batch_size=4)  # two steps an epoch


def _trainer(tmp_path: Path, averaging: WeightAverage, max_steps: int, **kwargs) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        callbacks=[averaging],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **kwargs,
    )


def test_the_average_is_the_exponential_moving_average_of_the_weights_after_each_step(tmp_path):
    module, averaging = Line(), WeightAverage(decay=0.75, start_step=2)
    _trainer(tmp_path, averaging, max_steps=4).fit(module, _loader())
    steps = module.after_step  # weights after steps 1..4; the average starts at step 2 from the weights then
    expected = steps[1]
    for weights in steps[2:]:
        expected = 0.75 * expected + 0.25 * weights
    torch.testing.assert_close(averaging.average["layer.weight"], expected)
    assert not torch.allclose(expected, steps[-1])  # the average is not simply the last weights
    torch.testing.assert_close(module.layer.weight.detach(), steps[-1])  # training goes on from the weights themselves


def test_validation_scores_the_average_and_training_resumes_from_the_trained_weights(tmp_path):
    module, averaging = Line(), WeightAverage(decay=0.5)
    trainer = _trainer(tmp_path, averaging, max_steps=4, val_check_interval=2, num_sanity_val_steps=0, limit_val_batches=1)
    trainer.fit(module, _loader(), _loader())
    steps = module.after_step
    average_at_2 = 0.5 * steps[0] + 0.5 * steps[1]
    torch.testing.assert_close(module.validated[0], average_at_2)
    assert not torch.allclose(module.validated[0], steps[1])
    torch.testing.assert_close(module.layer.weight.detach(), steps[-1])


def test_a_checkpoint_holds_the_average_as_its_weights_and_the_trained_weights_beside_them(tmp_path):
    module, averaging = Line(), WeightAverage(decay=0.5)
    trainer = _trainer(tmp_path, averaging, max_steps=3)
    trainer.fit(module, _loader())
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    checkpoint = torch.load(tmp_path / "run.ckpt", map_location="cpu", weights_only=True)
    torch.testing.assert_close(checkpoint["state_dict"]["layer.weight"], averaging.average["layer.weight"])
    torch.testing.assert_close(checkpoint[TRAINED_STATE]["layer.weight"], module.layer.weight.detach())
    assert int(checkpoint["state_dict"]["seen"]) == 3  # buffers are the trained model's own


def test_a_resumed_run_ends_with_the_average_and_weights_of_a_run_never_stopped(tmp_path):
    whole, whole_average = Line(), WeightAverage(decay=0.5)
    _trainer(tmp_path / "whole", whole_average, max_steps=3).fit(whole, _loader())

    first, first_average = Line(), WeightAverage(decay=0.5)
    trainer = _trainer(tmp_path / "first", first_average, max_steps=2)
    trainer.fit(first, _loader())
    trainer.save_checkpoint(tmp_path / "half.ckpt")
    second, second_average = Line(), WeightAverage(decay=0.5)
    # One step past an epoch's end: Lightning resumes the loader exactly there, so any difference is the average's.
    _trainer(tmp_path / "second", second_average, max_steps=3).fit(second, _loader(), ckpt_path=tmp_path / "half.ckpt")

    torch.testing.assert_close(second.layer.weight.detach(), whole.layer.weight.detach())
    torch.testing.assert_close(second_average.average["layer.weight"], whole_average.average["layer.weight"])


def test_averaging_is_off_by_default_and_adds_nothing_to_a_checkpoint(tmp_path):
    module, averaging = Line(), WeightAverage()
    trainer = _trainer(tmp_path, averaging, max_steps=2)
    trainer.fit(module, _loader())
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    checkpoint = torch.load(tmp_path / "run.ckpt", map_location="cpu", weights_only=True)
    assert TRAINED_STATE not in checkpoint and not averaging.average
    torch.testing.assert_close(checkpoint["state_dict"]["layer.weight"], module.layer.weight.detach())


@pytest.mark.parametrize("decay", [1.0, -0.1])
def test_a_decay_outside_0_to_1_is_refused_naming_it(decay):
    with pytest.raises(ValueError, match=rf"averaging.decay {decay}: expected a number in \[0, 1\)"):
        WeightAverage(decay=decay)


def test_a_soup_is_the_mean_of_the_models_float_weights_and_keeps_their_shared_counters():
    models = [{"w": torch.full((2, 3), float(k)), "count": torch.tensor(7)} for k in (1, 2, 6)]
    soup = uniform_soup(models)
    torch.testing.assert_close(soup["w"], torch.full((2, 3), 3.0))
    assert soup["count"].dtype == torch.long and int(soup["count"]) == 7


@pytest.mark.parametrize(
    "other, message",
    [
        ({"w": torch.zeros(3, 2), "count": torch.tensor(7)}, r"w: shape \(3, 2\) in model 2"),
        ({"w": torch.zeros(2, 3), "count": torch.tensor(8)}, "count: a non-float tensor that differs"),
        ({"v": torch.zeros(2, 3), "count": torch.tensor(7)}, "other weights than model 1"),
    ],
)
def test_a_soup_of_models_that_are_not_one_architecture_is_refused_naming_the_weight(other, message):
    with pytest.raises(ValueError, match=message):
        uniform_soup([{"w": torch.zeros(2, 3), "count": torch.tensor(7)}, other])


def _export(folder: Path, value: float, hyper_parameters: dict, language_model: bytes = b"lm", extra: str | None = None) -> Path:
    export_folder(folder, "speech-attend", {"w": torch.full((4,), value)}, hyper_parameters)
    (folder / "lm.safetensors").write_bytes(language_model)
    if extra is not None:
        (folder / extra).write_bytes(b"{}")
    return folder


def test_average_models_writes_the_mean_export_with_the_first_models_language_model(tmp_path, capsys):
    a = _export(tmp_path / "a", 1.0, {"size": 4})
    b = _export(tmp_path / "b", 3.0, {"size": 4})
    assert average_models.main(["--models", str(a), str(b), "--out", str(tmp_path / "soup")]) == 0
    soup = load_model_files(tmp_path / "soup", "speech-attend")
    torch.testing.assert_close(soup.state_dict["w"], torch.full((4,), 2.0))
    assert soup.hyper_parameters == {"size": 4} and (tmp_path / "soup" / "lm.safetensors").read_bytes() == b"lm"
    assert "relative distances between them: 2.0000" in capsys.readouterr().out  # ||1 - 3|| / ||1||


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hyper_parameters": {"size": 8}}, "its settings differ from .*'s \\(size\\)"),
        ({"language_model": b"another"}, "lm.safetensors: missing or not the same file"),
        ({"extra": "lm.json"}, "b/lm.json: not in .*a; the folders must hold the same files"),
    ],
)
def test_average_models_refuses_exports_that_are_not_one_model_in_one_line(tmp_path, capsys, change, message):
    a = _export(tmp_path / "a", 1.0, {"size": 4})
    b = _export(tmp_path / "b", 3.0, **{"hyper_parameters": {"size": 4}, **change})
    assert average_models.main(["--models", str(a), str(b), "--out", str(tmp_path / "soup")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("average_models: error: ")
    assert re.search(message, error) and not (tmp_path / "soup").exists()


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda folder: (folder / "config.json").unlink(), "an exported model folder needs model.safetensors and config.json"),
        (
            lambda folder: (folder / "model.safetensors").write_bytes(b"garbage"),
            "model.safetensors: not a readable safetensors file",
        ),
    ],
)
def test_average_models_names_a_missing_or_corrupt_export_in_one_line(tmp_path, capsys, damage, message):
    a = _export(tmp_path / "a", 1.0, {"size": 4})
    b = _export(tmp_path / "b", 3.0, {"size": 4})
    damage(b)
    assert average_models.main(["--models", str(a), str(b), "--out", str(tmp_path / "soup")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and re.search(message, error) and str(b) in error
