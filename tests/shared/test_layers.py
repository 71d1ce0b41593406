"""The layers of the code base: inference needs no Lightning, the attention core needs neither app, and
the layers of ``shared`` (core, io, evaluation, training) import only those below them."""

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


def _shared_modules_below_training() -> list[str]:
    """The modules of ``shared``'s core, ``io`` and ``evaluation``."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    paths = [p.relative_to(root) for p in (root / "shared").rglob("*.py")]
    paths = [p for p in paths if p.parts[1] != "training"]
    return sorted(".".join(p.with_suffix("").parts).removesuffix(".__init__") for p in paths)


def test_shared_below_training_loads_neither_app_nor_lightning():
    modules = _shared_modules_below_training()
    assert {"shared", "shared.io.model_files", "shared.evaluation.plots"} <= set(modules)
    loaded = _modules_after_import(*modules)
    assert not {name for name in loaded if name.split(".")[0] in ("show_attend", "speech_attend")}
    assert not _lightning(loaded)


def test_the_apps_metrics_and_evaluations_import_no_lightning():
    loaded = _modules_after_import(
        "show_attend.evaluate.metrics",
        "speech_attend.evaluate.metrics",
        "show_attend.evaluate.evaluate",
        "speech_attend.evaluate.evaluate",
        "speech_attend.evaluate.tune",
        "speech_attend.evaluate.devsets",
    )
    assert "speech_attend.infer.transcribe" in loaded and "show_attend.infer.caption" in loaded  # the imports did happen
    assert not _lightning(loaded)


# The layers of ``shared``, lowest first: each may import itself and those before it, never one after it.
# The core (``shared/*.py``) is attention itself; ``io`` reads and writes what the programs read and
# write; ``evaluation`` measures and plots what both apps output; ``training`` is the Lightning plumbing.
_SHARED_LAYERS = ("core", "io", "evaluation", "training")
_LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")


def _shared_layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in _SHARED_LAYERS else "core"


def _shared_imports() -> list[tuple[str, str, str]]:
    """``(file, its layer, imported module)`` for every import in ``shared/``, relative ones made absolute."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted((root / "shared").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        package = module.split(".")[:-1]  # an __init__ is its own package: the same parts, less "__init__"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
                start = ".".join(filter(None, [base, node.module]))
                names = [start] + [f"{start}.{a.name}" for a in node.names]  # ``from . import kernels`` names a module
            else:
                continue
            found += [(str(path.relative_to(root)), _shared_layer(module), name) for name in names]
    return found


def test_shared_imports_run_only_down_its_layers_and_lightning_only_in_training():
    imports = _shared_imports()
    edges = {(layer, _shared_layer(name)) for _, layer, name in imports if name.split(".")[0] == "shared"}
    expected = {("core", "core"), ("evaluation", "io"), ("training", "io"), ("training", "evaluation")}
    assert expected <= edges  # the walk did find the imports
    for file, layer, name in imports:
        top = name.split(".")[0]
        assert top not in ("show_attend", "speech_attend"), f"{file} imports the app module {name}"
        if top == "shared":
            target = _shared_layer(name)
            assert _SHARED_LAYERS.index(target) <= _SHARED_LAYERS.index(layer), f"{file} ({layer}) imports {name} ({target})"
        if layer != "training":
            assert top not in _LIGHTNING, f"{file} ({layer}) imports Lightning: {name}"


# What each folder of an app may import of the same app (both apps alike): the network and the data
# stand alone, training builds on them and the metrics, inference on the network and the data, the
# built-in world needs only the data, and evaluation scores what inference outputs on data (the
# built-in world's among them) without Lightning.
_MAY_IMPORT = {
    "model": set(),
    "data": set(),
    "evaluate": {"data", "infer", "builtin"},
    "builtin": {"data"},
    "train": {"model", "data", "evaluate", "builtin"},
    "infer": {"model", "data"},
    "cli": {"model", "data", "evaluate", "train", "infer", "builtin"},
}


def _app_imports(app: str) -> dict[str, set[str]]:
    """For each folder of ``app`` (and its ``cli``), the folders of ``app`` that its files import."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / app
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

    root = Path(__file__).resolve().parents[2]
    folders = {
        app: sorted(p.name for p in (root / app).iterdir() if (p / "__init__.py").is_file())
        for app in ("show_attend", "speech_attend")
    }
    assert folders["show_attend"] == folders["speech_attend"] == sorted(set(_MAY_IMPORT) - {"cli"})
    for app in ("show_attend", "speech_attend"):
        imports = _app_imports(app)
        assert imports.get("train") and imports.get("infer") and "evaluate" in imports["train"]  # the walk did find the imports
        for folder, used in imports.items():
            assert used <= _MAY_IMPORT[folder], f"{app}.{folder} imports {sorted(used - _MAY_IMPORT[folder])}"


def test_the_commands_load_lightning_only_to_train():
    # transcribe and caption start faster without it (the shipped recognizer's 10-second file)
    loaded = _modules_after_import("speech_attend.cli", "show_attend.cli")
    assert "speech_attend.cli" in loaded and "show_attend.cli" in loaded
    assert not _lightning(loaded)
