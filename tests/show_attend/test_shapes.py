import itertools
import json

import numpy as np
import pytest
from PIL import Image

from show_attend.builtin.shapes import (
    COLOURS,
    SHAPES,
    SIZES,
    generate_scene,
    parse_caption,
    prepare_shapes,
)

# Default layout, the smallest image, and a crowded one: 60 scenes in all, about 0.1 s.
_SETTINGS = [(128, 4)] * 40 + [(32, 4)] * 10 + [(96, 9)] * 10


@pytest.fixture(scope="module")
def scenes():
    return [
        generate_scene(np.random.default_rng(i), image_size=size, max_objects=most) for i, (size, most) in enumerate(_SETTINGS)
    ]


def _band(box, image_size):
    """The row of an object by the documented rule: the third of the image holding its centre."""
    return int((box[1] + box[3]) / 2 * 3 // image_size)


def test_canonical_caption_names_exactly_the_drawn_objects(scenes):
    for scene in scenes:
        objects, relations = parse_caption(scene.captions[0])
        assert objects == [(o.size, o.colour, o.shape) for o in scene.objects]
        rows = [_band(o.box, scene.image.width) for o in scene.objects]
        expected = ["left of" if a == b else "above" for a, b in zip(rows, rows[1:])]
        assert relations == expected


def test_objects_are_listed_in_reading_order(scenes):
    for scene in scenes:
        size = scene.image.width
        order = sorted(scene.objects, key=lambda o: (_band(o.box, size), o.box[0]))
        assert order == scene.objects


def test_rows_are_unambiguous(scenes):
    for scene in scenes:
        size = scene.image.width
        for a, b in itertools.combinations(scene.objects, 2):
            if _band(a.box, size) == _band(b.box, size):  # same row: level, side by side
                assert a.box[1] < b.box[3] and b.box[1] < a.box[3]
                assert a.box[2] <= b.box[0] or b.box[2] <= a.box[0]
            else:  # different rows: one wholly above the other
                assert a.box[3] <= b.box[1] or b.box[3] <= a.box[1]


def test_object_counts_respect_max_objects(scenes):
    for scene, (_, most) in zip(scenes, _SETTINGS):
        assert 1 <= len(scene.objects) <= most
    assert {len(s.objects) for s in scenes[:40]} == {1, 2, 3, 4}


def test_objects_do_not_overlap_and_keep_a_margin(scenes):
    for scene in scenes:
        for a, b in itertools.combinations(scene.objects, 2):
            gap_x = max(a.box[0] - b.box[2], b.box[0] - a.box[2])
            gap_y = max(a.box[1] - b.box[3], b.box[1] - a.box[3])
            assert max(gap_x, gap_y) >= 2


def test_boxes_hold_their_objects_tightly(scenes):
    for scene in scenes:
        pixels = np.asarray(scene.image)
        size = scene.image.width
        for colour in {o.colour for o in scene.objects}:
            mask = (pixels == COLOURS[colour]).all(axis=2)
            covered = np.zeros_like(mask)
            for obj in (o for o in scene.objects if o.colour == colour):
                x0, y0, x1, y1 = obj.box
                assert 0 <= x0 < x1 <= size and 0 <= y0 < y1 <= size
                ys, xs = np.nonzero(mask[y0:y1, x0:x1])
                # the shape touches every side of its box (within a pixel of rounding)
                assert xs.min() <= 1 and ys.min() <= 1
                assert xs.max() >= x1 - x0 - 2 and ys.max() >= y1 - y0 - 2
                covered[y0:y1, x0:x1] = True
            assert not (mask & ~covered).any(), "object colour found outside every box"


def test_big_objects_are_about_twice_as_big_as_small_ones(scenes):
    for scene in scenes:
        for obj in scene.objects:
            side = obj.box[2] - obj.box[0]
            assert side == obj.box[3] - obj.box[1]
            cell = scene.image.width / 3
            expected = 0.8 * cell if obj.size == "big" else 0.44 * cell
            assert abs(side - expected) <= 0.1 * cell


def test_word_indices_point_at_the_object_names(scenes):
    for scene in scenes:
        tokens = scene.captions[0]
        assert len(scene.words) == len(scene.objects)
        for obj, words in zip(scene.objects, scene.words):
            assert [tokens[i] for i in words] == [obj.size, obj.colour, obj.shape]
        named = [i for words in scene.words for i in words]
        assert len(named) == len(set(named))  # each name word belongs to one object


def test_each_scene_has_two_to_four_distinct_paraphrases(scenes):
    vocabulary = {"a", "an", "above", "below", "left", "right", "of", "to", "the", "there", "is"}
    vocabulary |= {"and", "with", "picture", "single"} | set(SHAPES) | set(COLOURS) | set(SIZES)
    for scene in scenes:
        assert 3 <= len(scene.captions) <= 5
        assert len({" ".join(c) for c in scene.captions}) == len(scene.captions)
        for caption in scene.captions:
            assert set(caption) <= vocabulary
            for obj in scene.objects:
                assert obj.colour in caption and obj.shape in caption


def test_same_generator_state_gives_the_same_scene():
    a = generate_scene(np.random.default_rng(7))
    b = generate_scene(np.random.default_rng(7))
    assert a.objects == b.objects and a.captions == b.captions
    np.testing.assert_array_equal(np.asarray(a.image), np.asarray(b.image))


def test_parse_caption_rejects_other_sentences():
    for tokens in (
        [],
        "a big red".split(),
        "a red circle".split(),
        "a big red circle near a small blue square".split(),
        "a big red circle above".split(),
        "there is a big red circle".split(),
    ):
        with pytest.raises(ValueError):
            parse_caption(tokens)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    return prepare_shapes(out, train=6, val=2, test=3, seed=3, image_size=64, progress=False)


def test_dataset_json_follows_the_karpathy_format(small_dataset):
    data = json.loads(small_dataset.read_text())
    assert data["dataset"] == "shapes"
    images = data["images"]
    assert [im["split"] for im in images] == ["train"] * 6 + ["val"] * 2 + ["test"] * 3
    assert [im["imgid"] for im in images] == list(range(11))
    sentids = []
    for im in images:
        assert set(im) == {"filename", "imgid", "split", "sentids", "sentences", "objects"}
        with Image.open(small_dataset.parent / "images" / im["filename"]) as picture:
            assert picture.size == (64, 64) and picture.mode == "RGB"
        assert im["sentids"] == [s["sentid"] for s in im["sentences"]]
        for sentence in im["sentences"]:
            assert set(sentence) == {"tokens", "raw", "imgid", "sentid"}
            assert sentence["imgid"] == im["imgid"]
            assert sentence["raw"].lower().rstrip(".").split() == sentence["tokens"]
        sentids += im["sentids"]
        tokens = im["sentences"][0]["tokens"]
        for obj in im["objects"]:
            assert set(obj) == {"shape", "colour", "size", "box", "words"}
            assert [tokens[i] for i in obj["words"]] == [obj["size"], obj["colour"], obj["shape"]]
            assert len(obj["box"]) == 4
    assert sentids == list(range(len(sentids)))


def test_same_seed_gives_byte_identical_files(small_dataset, tmp_path):
    again = prepare_shapes(tmp_path, train=6, val=2, test=3, seed=3, image_size=64, progress=False)
    assert again.read_bytes() == small_dataset.read_bytes()
    for name in ("shapes_000000.png", "shapes_000010.png"):
        first = (small_dataset.parent / "images" / name).read_bytes()
        assert (tmp_path / "images" / name).read_bytes() == first


def test_val_and_test_images_do_not_depend_on_the_train_count(small_dataset, tmp_path):
    fewer = prepare_shapes(tmp_path, train=1, val=2, test=3, seed=3, image_size=64, progress=False)
    ours = json.loads(small_dataset.read_text())["images"][6:]
    theirs = json.loads(fewer.read_text())["images"][1:]
    assert [im["sentences"][0]["tokens"] for im in ours] == [im["sentences"][0]["tokens"] for im in theirs]
    assert [im["objects"] for im in ours] == [im["objects"] for im in theirs]


def test_another_seed_gives_other_scenes(small_dataset, tmp_path):
    other = prepare_shapes(tmp_path, train=6, val=2, test=3, seed=4, image_size=64, progress=False)
    assert other.read_bytes() != small_dataset.read_bytes()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"train": -1},
        {"val": -5},
        {"train": 0, "val": 0, "test": 0},
        {"image_size": 31},
        {"max_objects": 0},
        {"max_objects": 10},
    ],
)
def test_bad_arguments_raise_value_error(tmp_path, kwargs):
    settings = {"train": 1, "val": 1, "test": 1, "progress": False} | kwargs
    with pytest.raises(ValueError):
        prepare_shapes(tmp_path, **settings)
    assert not (tmp_path / "dataset_shapes.json").exists()


def test_generate_scene_checks_its_arguments():
    with pytest.raises(ValueError, match="image_size"):
        generate_scene(np.random.default_rng(0), image_size=16)
    with pytest.raises(ValueError, match="max_objects"):
        generate_scene(np.random.default_rng(0), max_objects=12)
