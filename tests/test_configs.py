"""Every config under configs/ is one its app's command line takes: no typo, no option that is gone."""

from pathlib import Path

import pytest

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_config_parses_with_its_apps_fit(config, capsys):
    if config.parent.name == "speech_attend":
        from speech_attend.cli import main
    else:
        from show_attend.cli import main
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit.value.code in (0, None), capsys.readouterr().err
    assert "model:" in capsys.readouterr().out


def test_the_configs_are_found():
    names = {path.name for path in CONFIGS}
    assert {"broad_pretrained.yaml", "librispeech100_pretrained.yaml", "demo.yaml"} <= names
