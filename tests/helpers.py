"""Tiny model configs shared by the test modules (``from tiny import tiny_speech_config``)."""

import copy

# A LAS of a few thousand parameters that trains a step in well under a second.
TINY_SPEECH_CONFIG = {
    "seed_everything": 0,
    "trainer": {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": 3,
        "limit_val_batches": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": False,
    },
    "model": {
        "las": {
            "listener_hidden": 8,
            "pyramid_layers": 2,
            "speller_hidden": 16,
            "embedding_dim": 8,
            "attention_dim": 8,
            "location_filters": 2,
            "location_kernel": 5,
            "ctc_upsample": 2,
        },
        "decoding": {"beam_size": 2, "val_beam_size": 1, "max_len_ratio": 1.0},
        "optimizer": {"warmup_steps": 1},
    },
    "data": {"batch_size": 4, "eval_batch_size": 4, "cache_audio": True},
}


def tiny_speech_config(trainer: dict | None = None, data: dict | None = None) -> dict:
    """A fresh copy of :data:`TINY_SPEECH_CONFIG` with ``trainer`` and ``data`` keys overridden
    (a ``None`` value removes a key)."""
    config = copy.deepcopy(TINY_SPEECH_CONFIG)
    for section, changes in (("trainer", trainer), ("data", data)):
        for key, value in (changes or {}).items():
            if value is None:
                config[section].pop(key, None)
            else:
                config[section][key] = value
    return config
