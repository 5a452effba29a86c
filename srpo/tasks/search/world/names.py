"""Names of the world: words of random syllables, unique across the world, each word belonging to
one category only (a family name is never a city name, an organisation's stem never a title
word), so one entity's name never occurs inside another's or inside a question about something
else; and the titles of works, each carrying such a word (so no title is a real one).

All draws come from the world's one generator, in the order generation asks for them.
"""

from __future__ import annotations

import random

_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "b", "d", "k", "l", "m", "n", "r", "s", "t", "v",
           "br", "dr", "gr", "kr", "tr", "vr", "th", "sh", "kh", "zh", "q", "y")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "a", "e", "o", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "", "", "", "", "", "n", "r", "l", "s", "th", "m", "k")
_ENDINGS = {  # a suffix that gives each category a recognisable shape
    "city": ("mora", "vik", "dell", "holm", "ost", "wyn", "gard", "ence", "ith", "ara"),
    "country": ("ia", "and", "esh", "ora", "eth", "onia", "ar"),
    "currency": ("el", "un", "ar", "ot"),
}


# Generated words that happen to be common real names or words; rejected.
_REAL = frozenset((
    "nara", "anna", "maria", "thomas", "sara", "sarah", "karen", "lima", "rome", "paris",
    "oslo", "tokyo", "milan", "dana", "tina", "nina", "lena", "mara", "dora", "vera", "kira",
    "tara", "sofia", "lara", "luna", "nora", "mona", "maya", "rosa", "lisa", "elena", "ella",
    "emma", "ida", "ada", "eva", "sam", "tom", "ben", "dan", "don", "ron", "ken", "rob", "bob",
    "jon", "leon", "toby", "hugo", "otto", "bruno", "dino", "nero", "zeus", "thor", "odin",
    "hera", "juno", "mars", "venus", "india", "china", "japan", "peru", "chad", "mali", "iran",
    "iraq", "cuba", "togo", "oman", "niger", "kenya", "boston", "berlin", "sydney", "delhi",
    "dubai", "doha", "riga", "baku", "kiev", "minsk", "bern", "nice", "troy", "sparta",
    "shark", "tiger", "lion", "bear", "hawk", "moon", "star", "sun", "sky", "rain", "snow",
    "fire", "stone", "river", "bank", "book", "film",
))


_ADJECTIVES = ("Silent", "Glass", "Hollow", "Crimson", "Distant", "Burning", "Quiet",
               "Broken", "Golden", "Winter", "Salt", "Iron", "Pale", "Seventh", "Wandering",
               "Hidden", "Last", "Northern", "Paper", "Amber")
_NOUNS = ("Orchard", "Lantern", "Harbour", "Archive", "Meridian", "Garden", "Cartographer",
          "Tide", "Bellfounder", "Mirror", "Staircase", "Season", "Chronicle", "Procession",
          "Compass", "Threshold", "Lighthouse", "Weaver", "Carousel", "Atlas")


class _Names:
    """Unique syllable names; each word belongs to one category only."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.word_category: dict[str, str] = {}
        self.full: set[str] = set()

    def _syllables(self, lo: int, hi: int) -> str:
        r = self.rng
        return "".join(r.choice(_ONSETS) + r.choice(_NUCLEI) + r.choice(_CODAS)
                       for _ in range(r.randint(lo, hi)))

    def word(self, category: str, lo: int = 2, hi: int = 2) -> str:
        for _ in range(10_000):
            w = self._syllables(lo, hi)
            if category in _ENDINGS:
                ending = self.rng.choice(_ENDINGS[category])
                w = (w[:-1] if w[-1] in "aeiouy" and ending[0] in "aeiouy" else w) + ending
            key = w.lower()
            if not 5 <= len(w) <= 11 or key in _REAL or key in self.word_category:
                continue
            self.word_category[key] = category
            return w.capitalize()
        raise RuntimeError(f"could not generate a new {category} name")  # pragma: no cover

    def unique(self, make) -> str:
        """A full name from `make()` not used before (retries on collision)."""
        for _ in range(10_000):
            name = make()
            if name.lower() not in self.full:
                self.full.add(name.lower())
                return name
        raise RuntimeError("could not generate a unique name; enlarge the name pools")


def _title(rng: random.Random, names: _Names) -> str:
    # Every title carries a generated word, so no title is a real one.
    word = names.word("title", 2, 2)
    pattern = rng.randrange(4)
    if pattern == 0:
        return f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} of {word}"
    if pattern == 1:
        return f"{rng.choice(_NOUNS)} of {word}"
    if pattern == 2:
        noun = rng.choice(_NOUNS)
        return f"{rng.choice(_ADJECTIVES)} {noun}{'es' if noun.endswith('s') else 's'} in {word}"
    return f"The {word} {rng.choice(_NOUNS)}"
