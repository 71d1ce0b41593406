"""Bad samples are skipped and logged; too many, or a non-finite loss, stop the run clearly."""

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from shared.io.bad_samples import BadSample, drop_bad_samples
from shared.training.guards import NonFiniteLoss, SkipBadSamples, StopOnNonFinite, TooManyBadSamples


class _Items(Dataset):
    def __init__(self, n, bad):
        self.n, self.bad = n, set(bad)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return BadSample(f"/data/item{i}.png", "truncated file") if i in self.bad else torch.full((2,), float(i))


def _collate(items):
    good, bad = drop_bad_samples(items)
    return {"x": torch.stack(good), "skipped": bad, "batch_size": len(good)}


class _Model(pl.LightningModule):
    def __init__(self, nan_at_step=None, gradient_at_step=None):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.nan_at_step = nan_at_step
        self.gradient_at_step = gradient_at_step  # (step, value): the weight's gradient is set to value

    def on_after_backward(self):
        if self.gradient_at_step and self.global_step == self.gradient_at_step[0]:
            self.layer.weight.grad.fill_(self.gradient_at_step[1])

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch["x"] / 100).pow(2).mean()
        if self.global_step == self.nan_at_step:
            loss = loss * float("nan")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path, callbacks):
    return pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_a_few_bad_samples_are_skipped_and_logged(tmp_path):
    callback = SkipBadSamples(max_fraction=0.05, min_samples=50)
    loader = DataLoader(_Items(100, bad=[3, 50]), batch_size=10, collate_fn=_collate)
    _trainer(tmp_path, [callback]).fit(_Model(), loader)
    assert (callback.seen, callback.skipped) == (100, 2)
    lines = (tmp_path / "skipped_samples.log").read_text().splitlines()
    assert lines == ["/data/item3.png\ttruncated file", "/data/item50.png\ttruncated file"]


def test_too_many_bad_samples_fail_with_a_clear_message(tmp_path):
    loader = DataLoader(_Items(100, bad=range(0, 100, 10)), batch_size=10, collate_fn=_collate)
    with pytest.raises(TooManyBadSamples, match=r"could not be read, more than the limit of 1\.0%"):
        _trainer(tmp_path, [SkipBadSamples(max_fraction=0.01, min_samples=20)]).fit(_Model(), loader)


def test_non_finite_loss_stops_and_saves_the_last_good_state(tmp_path):
    loader = DataLoader(_Items(100, bad=[]), batch_size=10, collate_fn=_collate)
    model = _Model(nan_at_step=3)
    with pytest.raises(NonFiniteLoss, match=r"non-finite loss .* at global step 3 .*batch 3"):
        _trainer(tmp_path, [StopOnNonFinite()]).fit(model, loader)
    saved = torch.load(tmp_path / "checkpoints" / "last_good.ckpt", weights_only=True)
    assert saved["global_step"] == 3
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values())


def test_non_finite_gradient_with_a_finite_loss_stops_and_names_the_parameter(tmp_path):
    loader = DataLoader(_Items(100, bad=[]), batch_size=10, collate_fn=_collate)
    model = _Model(gradient_at_step=(2, float("inf")))
    with pytest.raises(NonFiniteLoss, match=r"non-finite gradient in layer\.weight at global step 2 "):
        _trainer(tmp_path, [StopOnNonFinite()]).fit(model, loader)
    assert torch.load(tmp_path / "checkpoints" / "last_good.ckpt", weights_only=True)["global_step"] == 2


def test_huge_finite_gradients_whose_norm_overflows_do_not_stop_training(tmp_path):
    loader = DataLoader(_Items(100, bad=[]), batch_size=10, collate_fn=_collate)
    # Finite, but its square overflows float32; at the last step, as the update it makes would
    # (rightly) give an inf loss at the next.
    model = _Model(gradient_at_step=(9, 1e30))
    assert not torch.nn.utils.get_total_norm([torch.full((2,), 1e30)]).isfinite()
    trainer = _trainer(tmp_path, [StopOnNonFinite()])
    trainer.fit(model, loader)
    assert trainer.global_step == 10  # the whole epoch ran
