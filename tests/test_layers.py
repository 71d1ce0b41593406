"""The layers of the code base: inference needs no Lightning, and the attention core needs neither app."""

import subprocess
import sys


def _modules_after_import(*modules: str) -> set[str]:
    code = f"import sys; import {', '.join(modules)}; print('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(result.stdout.split())


def test_captioning_and_transcribing_import_no_lightning():
    loaded = _modules_after_import("show_attend.caption", "speech_attend.transcribe")
    assert "show_attend.model" in loaded and "speech_attend.model" in loaded  # the imports did happen
    assert not {name for name in loaded if name.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric")}


def test_the_attention_core_imports_neither_app_nor_lightning():
    loaded = _modules_after_import("shared", "shared.evaluation.captions", "shared.evaluation.speech", "shared.evaluation.plots")
    assert not {name for name in loaded if name.split(".")[0] in ("show_attend", "speech_attend", "pytorch_lightning")}
