"""The layers of the code base: inference needs no Lightning, and the attention core needs neither app."""

import subprocess
import sys


def _modules_after_import(*modules: str, then: str = "") -> set[str]:
    """The modules loaded by a new Python after ``import MODULES`` and the statement ``then``."""
    code = "; ".join(filter(None, ["import sys", f"import {', '.join(modules)}", then, "print('\\n'.join(sys.modules))"]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(result.stdout.split())


def _lightning(loaded: set[str]) -> set[str]:
    return {name for name in loaded if name.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric")}


def test_captioning_and_transcribing_and_the_apps_python_interfaces_import_no_lightning():
    loaded = _modules_after_import(
        "show_attend.infer.caption",
        "speech_attend.infer.transcribe",
        then="from show_attend import Captioning; from speech_attend import Transcriber",
    )
    assert "show_attend.model.captioner" in loaded and "speech_attend.model.las" in loaded  # the imports did happen
    assert not _lightning(loaded)


def test_the_attention_core_imports_neither_app_nor_lightning():
    loaded = _modules_after_import("shared", "shared.evaluation.captions", "shared.evaluation.speech", "shared.evaluation.plots")
    assert not {name for name in loaded if name.split(".")[0] in ("show_attend", "speech_attend", "pytorch_lightning")}


# What each folder of an app may import of the same app (both apps alike): the network and the data
# stand alone, training and inference build on them, the built-in world needs only the data.
_MAY_IMPORT = {
    "model": set(),
    "data": set(),
    "builtin": {"data"},
    "train": {"model", "data", "builtin"},
    "infer": {"model", "data"},
    "cli": {"model", "data", "train", "infer", "builtin"},
}


def _app_imports(app: str) -> dict[str, set[str]]:
    """For each folder of ``app`` (and its ``cli``), the folders of ``app`` that its files import."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / app
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        folder = path.relative_to(root).parts[0].removesuffix(".py")
        if folder == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] == app and len(parts) > 1 and parts[1] != folder:
                    found.setdefault(folder, set()).add(parts[1])
    return found


def test_both_apps_have_the_same_folders_and_their_imports_run_only_down():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    folders = {
        app: sorted(p.name for p in (root / app).iterdir() if (p / "__init__.py").is_file())
        for app in ("show_attend", "speech_attend")
    }
    assert folders["show_attend"] == folders["speech_attend"] == sorted(set(_MAY_IMPORT) - {"cli"})
    for app in ("show_attend", "speech_attend"):
        imports = _app_imports(app)
        assert imports.get("train") and imports.get("infer")  # the walk did find the imports
        for folder, used in imports.items():
            assert used <= _MAY_IMPORT[folder], f"{app}.{folder} imports {sorted(used - _MAY_IMPORT[folder])}"


def test_the_commands_load_lightning_only_to_train():
    # transcribe and caption start faster without it (the shipped recognizer's 10-second file)
    loaded = _modules_after_import("speech_attend.cli", "show_attend.cli")
    assert "speech_attend.cli" in loaded and "show_attend.cli" in loaded
    assert not _lightning(loaded)
