"""Random English sentences for the built-in spoken corpus.

A small phrase-structure grammar over fixed word lists (about 700 common English words):
``sentence -> clause [conjunction clause]``, ``clause -> subject verb-phrase``, where a verb
phrase is a past-tense verb, a modal or ``didn't`` with the base form, or ``never`` with the
past form, then an optional object, adverb and prepositional phrase. Past tense everywhere
keeps subject-verb agreement trivially right. Sentences have 3 to 12 words, only lower-case
letters, spaces and apostrophes, and the same seed always gives the same sentences.
"""

from __future__ import annotations

import random

__all__ = ["generate_sentence", "generate_sentences", "vocabulary", "MIN_WORDS", "MAX_WORDS"]

MIN_WORDS = 3
MAX_WORDS = 12

_DETERMINERS = "the a this that every my your his her our their each another no".split()
_SUBJECT_PRONOUNS = "i you he she we they".split()
_OBJECT_PRONOUNS = "me you him her us them it".split()
_NAMES = (
    "anna peter maria john david sarah james emma thomas lucy robert alice george helen paul laura mark julia daniel sophie"
).split()

# No nouns or adjectives that take "an" by sound but not by letter ("a unicorn", "an hour"):
# the article rule below looks at the first letter only.
_NOUNS = (
    # animals
    "dog cat horse bird fish mouse rabbit fox wolf bear lion tiger duck goose cow sheep goat "
    "pig chicken frog snake owl eagle deer monkey elephant whale spider bee donkey squirrel "
    # people
    "man woman child boy girl baby teacher doctor farmer driver baker painter sailor soldier "
    "student neighbour friend brother sister mother father uncle aunt king queen captain "
    "pilot nurse cook singer writer stranger guard prince princess"
    # things
    " book pen pencil letter paper box bag cup glass bottle plate bowl spoon knife fork chair "
    "table bed door window lamp clock key phone camera ticket map coin ring hat coat shirt "
    "shoe boot glove scarf umbrella basket bucket rope ladder hammer brush mirror picture "
    "candle blanket pillow wallet radio computer bicycle car truck bus train boat ship plane "
    "wagon kettle envelope parcel drum guitar piano violin "
    # places
    "house room kitchen garden school church market shop office library station bridge road "
    "street river lake sea beach island forest hill mountain valley field farm village city "
    "town park castle tower harbour cave desert cottage palace museum hospital "
    # food
    "apple orange banana bread cake cheese egg soup rice milk coffee tea water sugar butter "
    "honey lemon potato carrot tomato sandwich cookie pie onion pear "
    # nature and the rest
    "tree flower leaf stone rock sand snow rain wind cloud sun moon star sky fire storm grass "
    "song story game gift prize plan idea question answer secret message dream puzzle "
    "photograph newspaper journey"
).split()

_ADJECTIVES = (
    "big small large tiny tall short long old young new ancient modern happy sad angry calm "
    "quiet loud bright dark warm cold hot cool wet dry clean dirty heavy light soft hard "
    "smooth rough sharp round flat empty full rich poor kind cruel brave shy clever silly "
    "lazy busy gentle wild tame strange famous lucky lonely hungry thirsty tired sleepy "
    "friendly proud polite red blue green yellow black white brown grey pink purple golden "
    "silver wooden broken hidden simple fresh sweet sour bitter salty delicious pretty "
    "beautiful ugly handsome fancy plain narrow wide deep shallow thick thin fast slow "
    "distant careful curious eager fierce nervous patient quick rare steady sudden tidy "
    "wise noisy muddy dusty sunny rainy windy foggy icy frozen"
).split()

# (base form, past form): both forms are used, so both count towards the vocabulary.
_TRANSITIVE = [
    tuple(pair.split("/"))
    for pair in (
        "see/saw find/found take/took give/gave bring/brought buy/bought sell/sold make/made "
        "break/broke hold/held carry/carried push/pushed pull/pulled open/opened close/closed "
        "paint/painted build/built wash/washed clean/cleaned fix/fixed follow/followed "
        "watch/watched chase/chased catch/caught throw/threw drop/dropped lift/lifted "
        "move/moved hide/hid visit/visited leave/left meet/met call/called help/helped "
        "teach/taught tell/told show/showed read/read write/wrote draw/drew cook/cooked "
        "eat/ate drink/drank bake/baked cut/cut fill/filled pack/packed borrow/borrowed "
        "lend/lent keep/kept lose/lost win/won send/sent touch/touched kick/kicked hit/hit "
        "feed/fed count/counted check/checked change/changed hear/heard love/loved "
        "like/liked want/wanted need/needed remember/remembered forget/forgot "
        "answer/answered miss/missed pass/passed share/shared steal/stole grab/grabbed "
        "shake/shook climb/climbed cross/crossed ride/rode drive/drove choose/chose "
        "order/ordered mend/mended greet/greeted thank/thanked admire/admired "
        "study/studied wrap/wrapped"
    ).split()
]
_INTRANSITIVE = [
    tuple(pair.split("/"))
    for pair in (
        "sleep/slept run/ran walk/walked sit/sat stand/stood jump/jumped laugh/laughed "
        "cry/cried smile/smiled wait/waited swim/swam fly/flew fall/fell dance/danced "
        "sing/sang shout/shouted whisper/whispered rest/rested arrive/arrived stay/stayed "
        "return/returned wander/wandered work/worked play/played hurry/hurried "
        "listen/listened shiver/shivered grow/grew disappear/disappeared appear/appeared "
        "rise/rose wake/woke sneeze/sneezed yawn/yawned kneel/knelt live/lived speak/spoke "
        "hide/hid"
    ).split()
]
_MODALS = "will can could should would must might didn't".split()
_ADVERBS = (
    "quickly slowly quietly loudly carefully happily sadly suddenly gently softly early late "
    "again today yesterday tonight soon now there here outside inside away together alone "
    "twice once often finally politely bravely calmly eagerly proudly nervously patiently"
).split()
_PREPOSITIONS = (
    "in on under near behind beside above below across through along past toward around over into from with without at by"
).split()
_CONJUNCTIONS = "and but while because when before after so".split()


def vocabulary() -> frozenset[str]:
    """Every word the generator can produce (including ``an``, which replaces ``a``)."""
    words = {"an", "never"}
    for group in (
        _DETERMINERS,
        _SUBJECT_PRONOUNS,
        _OBJECT_PRONOUNS,
        _NAMES,
        _NOUNS,
        _ADJECTIVES,
        _MODALS,
        _ADVERBS,
        _PREPOSITIONS,
        _CONJUNCTIONS,
    ):
        words.update(group)
    for pairs in (_TRANSITIVE, _INTRANSITIVE):
        for base, past in pairs:
            words.update((base, past))
    return frozenset(words)


def _noun_phrase(rng: random.Random) -> list[str]:
    det, noun = rng.choice(_DETERMINERS), rng.choice(_NOUNS)
    r = rng.random()
    if r < 0.45:
        return [det, noun]
    if r < 0.88:
        return [det, rng.choice(_ADJECTIVES), noun]
    first, second = rng.sample(_ADJECTIVES, 2)
    return [det, first, second, noun]


def _subject(rng: random.Random) -> list[str]:
    r = rng.random()
    if r < 0.15:
        return [rng.choice(_NAMES)]
    if r < 0.3:
        return [rng.choice(_SUBJECT_PRONOUNS)]
    return _noun_phrase(rng)


def _object(rng: random.Random) -> list[str]:
    r = rng.random()
    if r < 0.1:
        return [rng.choice(_OBJECT_PRONOUNS)]
    if r < 0.2:
        return [rng.choice(_NAMES)]
    return _noun_phrase(rng)


def _verb_phrase(rng: random.Random) -> list[str]:
    transitive = rng.random() < 0.6
    base, past = rng.choice(_TRANSITIVE if transitive else _INTRANSITIVE)
    r = rng.random()
    if r < 0.7:
        words = [past]
    elif r < 0.85:
        words = [rng.choice(_MODALS), base]
    else:
        words = ["never", past]
    if transitive:
        words += _object(rng)
    if rng.random() < 0.3:
        words.append(rng.choice(_ADVERBS))
    if rng.random() < 0.35:
        words += [rng.choice(_PREPOSITIONS)] + _noun_phrase(rng)
    return words


def _articles(words: list[str]) -> list[str]:
    return ["an" if w == "a" and i + 1 < len(words) and words[i + 1][0] in "aeiou" else w for i, w in enumerate(words)]


def generate_sentence(rng: random.Random) -> str:
    """Draw one sentence of ``MIN_WORDS`` to ``MAX_WORDS`` words.

    Args:
        rng (random.Random): source of randomness; the sentence depends only on its state.

    Returns:
        str: lower-case words separated by single spaces, e.g.
        ``"the old farmer carried a heavy basket across the bridge"``.
    """
    while True:  # rejection keeps the grammar simple; about 1 draw in 4 is out of range
        words = _subject(rng) + _verb_phrase(rng)
        if rng.random() < 0.25:
            words += [rng.choice(_CONJUNCTIONS)] + _subject(rng) + _verb_phrase(rng)
        if MIN_WORDS <= len(words) <= MAX_WORDS:
            return " ".join(_articles(words))


def generate_sentences(n: int, seed: int = 0) -> list[str]:
    """Draw ``n`` sentences; the same ``seed`` always gives the same list.

    Args:
        n (int): number of sentences.
        seed (int, optional): random seed. (Default: ``0``)

    Returns:
        list of str: ``n`` sentences as :func:`generate_sentence` makes them.
    """
    rng = random.Random(seed)
    return [generate_sentence(rng) for _ in range(n)]
