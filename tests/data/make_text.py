"""Regenerate tests/data/tiny-text: English-like stories from a small probabilistic grammar.

Perplexity checks need a model that has learned something, and a tiny model only learns
from text with structure it can pick up in minutes on a CPU. So the text here is generated
from a grammar with real regularities rather than drawn from uniform word soup: characters
keep their names and pronouns through a story, articles agree with the next word (a/an),
verbs and nouns agree in number (one apple, three apples; the cup was, the cups were; she
has, I have), a lost object comes back later in the same story, sums add up, and stories
reuse stock phrases (Once upon a time, The end.). The vocabulary is a few hundred words.

Everything is original and drawn from stdlib `random` with fixed seeds, so

    python tests/data/make_text.py

rewrites train.txt (~400 KB) and eval.txt (~20 KB, another seed, same grammar) byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "tiny-text"
TRAIN_SEED, TRAIN_BYTES = 1, 400_000
EVAL_SEED, EVAL_BYTES = 2, 20_000

GIRLS = "Mia Lily Ana Rosa Nora Ella Zoe Ruby Ivy Maya Lena Sara Kira Tess Hana".split()
BOYS = "Tom Sam Leo Ben Max Finn Omar Theo Jack Ravi Noah Eli Owen Hugo Kai".split()
ANIMALS = "rabbit fox mouse bear cat dog duck frog owl turtle squirrel hedgehog goat pig lamb".split()
TRAITS = "kind brave shy curious clever sleepy friendly quiet funny gentle busy grumpy careful cheerful".split()
SIZES = "big small little tiny huge old new".split()
COLORS = "red blue green yellow purple orange white black brown pink golden silver".split()
FEELINGS = "happy sad proud scared surprised tired excited worried calm angry glad lonely".split()
WEATHER = "sunny rainy windy cold warm snowy cloudy bright".split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
TIMES = "morning afternoon evening".split()
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()

# (singular, plural)
OBJECTS = [
    ("ball", "balls"),
    ("kite", "kites"),
    ("box", "boxes"),
    ("apple", "apples"),
    ("cup", "cups"),
    ("book", "books"),
    ("hat", "hats"),
    ("boat", "boats"),
    ("key", "keys"),
    ("lamp", "lamps"),
    ("shell", "shells"),
    ("stone", "stones"),
    ("flower", "flowers"),
    ("cake", "cakes"),
    ("drum", "drums"),
    ("map", "maps"),
    ("bell", "bells"),
    ("coin", "coins"),
    ("feather", "feathers"),
    ("basket", "baskets"),
    ("blanket", "blankets"),
    ("candle", "candles"),
    ("cookie", "cookies"),
    ("egg", "eggs"),
    ("leaf", "leaves"),
    ("berry", "berries"),
    ("pencil", "pencils"),
    ("letter", "letters"),
    ("toy", "toys"),
    ("sock", "socks"),
    ("spoon", "spoons"),
    ("ribbon", "ribbons"),
    ("button", "buttons"),
    ("jar", "jars"),
    ("wagon", "wagons"),
    ("umbrella", "umbrellas"),
    ("orange", "oranges"),
    ("acorn", "acorns"),
    ("whistle", "whistles"),
    ("puzzle", "puzzles"),
]
EDIBLE = {"apple", "cake", "cookie", "egg", "berry", "orange", "acorn"}

# where a character lives
HOMES = [
    "a small house near the river",
    "a little cottage at the edge of the forest",
    "a tall tree in the middle of the park",
    "a cozy hole under an old oak",
    "a blue house on top of the hill",
    "a busy street in the big city",
    "a quiet farm by the lake",
    "a wooden hut close to the beach",
    "an old mill beside the stream",
    "a yellow house next to the bakery",
]
# where characters go (the noun after "to the")
PLACES = [
    "park",
    "market",
    "forest",
    "beach",
    "hill",
    "garden",
    "school",
    "library",
    "lake",
    "farm",
    "river",
    "bakery",
    "meadow",
    "cave",
    "harbor",
    "castle",
    "zoo",
    "pond",
    "bridge",
    "playground",
]
# where a lost thing turns up
SPOTS = [
    "under the bed",
    "behind the door",
    "in the garden",
    "under a big leaf",
    "on the kitchen table",
    "next to the window",
    "inside the old shoe",
    "on top of the shelf",
    "under the blanket",
    "in the pocket of a coat",
    "beside the front step",
    "in the grass by the fence",
]
# (base, past, third person singular): things two friends do together
ACTIVITIES = [
    ("play a game", "played a game", "plays a game"),
    ("build a sand castle", "built a sand castle", "builds a sand castle"),
    ("sing a song", "sang a song", "sings a song"),
    ("read a story", "read a story", "reads a story"),
    ("paint a picture", "painted a picture", "paints a picture"),
    ("fly a kite", "flew a kite", "flies a kite"),
    ("look for shells", "looked for shells", "looks for shells"),
    ("jump in the puddles", "jumped in the puddles", "jumps in the puddles"),
    ("climb a tree", "climbed a tree", "climbs a tree"),
    ("bake some bread", "baked some bread", "bakes some bread"),
    ("feed the ducks", "fed the ducks", "feeds the ducks"),
    ("watch the clouds", "watched the clouds", "watches the clouds"),
    ("race to the gate", "raced to the gate", "races to the gate"),
    ("plant some seeds", "planted some seeds", "plants some seeds"),
    ("draw a map", "drew a map", "draws a map"),
    ("count the stars", "counted the stars", "counts the stars"),
]
# (base, past): verbs that take one of the objects
HANDLE = [
    ("find", "found"),
    ("carry", "carried"),
    ("hold", "held"),
    ("wash", "washed"),
    ("open", "opened"),
    ("hide", "hid"),
    ("buy", "bought"),
    ("paint", "painted"),
    ("fix", "fixed"),
    ("share", "shared"),
    ("pick up", "picked up"),
    ("look at", "looked at"),
]
MISHAPS = [
    "rolled away",
    "fell into the water",
    "flew up into a tree",
    "went missing",
    "was gone",
    "slipped out of the bag",
]
SAID = ["said", "said", "said", "replied", "whispered", "shouted", "laughed"]


@dataclass
class Who:
    """A character: the pronouns follow the name through the whole story."""

    name: str
    kind: str
    he: str
    him: str
    his: str


def article(word: str) -> str:
    """'a' or 'an' by the next word's first letter, the agreement the model should learn."""
    return "an" if word[0] in "aeiou" else "a"


def count(n: int, obj: tuple[str, str], rng: random.Random) -> str:
    """'one apple', 'three apples' or '3 apples': number agreement, words or digits."""
    noun = obj[0] if n == 1 else obj[1]
    num = NUMBERS[n] if n < len(NUMBERS) and rng.random() < 0.75 else str(n)
    return f"{num} {noun}"


def cap(text: str) -> str:
    return text[0].upper() + text[1:]


class Story:
    """One story: picks its cast and its object once, then writes paragraphs about them."""

    def __init__(self, rng: random.Random, number: int) -> None:
        self.rng = rng
        self.number = number
        names = rng.sample([(n, "f") for n in GIRLS] + [(n, "m") for n in BOYS], 2)
        self.hero, self.friend = (self.who(*nm) for nm in names)
        self.obj = rng.choice(OBJECTS)
        self.color = rng.choice(COLORS)
        self.place = rng.choice(PLACES)
        self.activity = rng.choice(ACTIVITIES)

    def who(self, name: str, gender: str) -> Who:
        rng = self.rng
        if rng.random() < 0.5:
            kind = "girl" if gender == "f" else "boy"
        else:
            kind = rng.choice(ANIMALS)
        if gender == "f":
            return Who(name, kind, "she", "her", "her")
        return Who(name, kind, "he", "him", "his")

    def say(self, who: Who, line: str, asked: bool = False) -> str:
        verb = "asked" if asked else self.rng.choice(SAID)
        if line.endswith((".", "!", "?")) and not line.endswith("?"):
            line = line[:-1] + ("," if line.endswith(".") else "!")
        return f'"{line}" {verb} {who.name}.'

    def title(self) -> str:
        o = self.obj[0]
        options = [
            f"{self.hero.name} and the {cap(self.color)} {cap(o)}",
            f"The Day {self.hero.name} Went to the {cap(self.place)}",
            f"{self.hero.name} and {self.friend.name}",
            f"A {cap(self.obj[0])} for {self.friend.name}",
        ]
        return f"Story {self.number}: {self.rng.choice(options)}"

    def opening(self) -> str:
        rng, h = self.rng, self.hero
        trait = rng.choice(TRAITS)
        first = rng.choice(
            [
                f"Once upon a time, there was {article(trait)} {trait} {h.kind} named {h.name}.",
                f"Once upon a time, there was a little {h.kind} named {h.name}.",
                f"There once was {article(trait)} {trait} {h.kind} called {h.name}.",
            ]
        )
        lines = [first, f"{cap(h.he)} lived in {rng.choice(HOMES)}."]
        age = rng.randint(3, 11)
        if rng.random() < 0.5:
            lines.append(f"{cap(h.he)} was {NUMBERS[age] if rng.random() < 0.5 else age} years old.")
        o = self.obj
        lines.append(
            rng.choice(
                [
                    f"{h.name} had {article(self.color)} {self.color} {o[0]} that {h.he} loved very much.",
                    f"{cap(h.his)} favorite thing in the world was {article(self.color)} {self.color} {o[0]}.",
                    f"Every day, {h.name} played with {h.his} {self.color} {o[0]}.",
                ]
            )
        )
        return " ".join(lines)

    def setting(self) -> str:
        rng = self.rng
        day, when, weather = rng.choice(DAYS), rng.choice(TIMES), rng.choice(WEATHER)
        return rng.choice(
            [
                f"One {weather} {when}, {self.hero.name} went to the {self.place}.",
                f"On {day} {when}, it was {weather}, so {self.hero.name} went to the {self.place}.",
                f"One day, {self.hero.name} walked to the {self.place}. It was a {weather} day.",
                f"It was {rng.randint(1, 12)} o'clock on {day}, and {self.hero.name} went to the {self.place}.",
            ]
        )

    def meeting(self) -> list[str]:
        rng, h, f = self.rng, self.hero, self.friend
        trait = rng.choice(TRAITS)
        act = self.activity
        lines = [
            f"There {h.he} met {f.name}, {article(trait)} {trait} {f.kind}.",
            self.say(h, f"Hello, {f.name}!"),
            self.say(h, f"Do you want to {act[0]} with me?", asked=True),
        ]
        if rng.random() < 0.8:
            lines.append(self.say(f, rng.choice(["Yes, I would like that!", "Yes, please!", "Of course!"])))
            lines.append(f"So {h.name} and {f.name} {act[1]} together.")
        else:
            lines.append(self.say(f, f"Not now. I have to {rng.choice(HANDLE)[0]} my {rng.choice(OBJECTS)[0]}."))
            lines.append(f"{h.name} felt {rng.choice(['sad', 'lonely'])}, so {h.he} {act[1]} alone.")
        return lines

    def counting(self) -> str:
        rng, h, f = self.rng, self.hero, self.friend
        thing = rng.choice(OBJECTS)
        a, b = rng.randint(1, 6), rng.randint(1, 6)
        lines = [
            f"{h.name} had {count(a, thing, rng)}.",
            f"{f.name} gave {h.him} {count(b, thing, rng)} more.",
            f"Now {h.he} had {count(a + b, thing, rng)}.",
        ]
        if rng.random() < 0.5:
            c = rng.randint(1, a + b)
            rest = a + b - c
            verb = "ate" if thing[0] in EDIBLE else "gave away"
            if rest == 0:
                end = f"{cap(h.he)} had no {thing[1]} left."
            else:
                verb_be = "was" if rest == 1 else "were"
                end = f"There {verb_be} {count(rest, thing, rng)} left."
            lines += [f"Then {h.he} {verb} {count(c, thing, rng)}.", end]
        return " ".join(lines)

    def describe(self) -> str:
        rng = self.rng
        thing = rng.choice(OBJECTS)
        n = rng.randint(1, 9)
        adj = rng.choice(SIZES + COLORS)
        if n == 1:
            return f"There was {article(adj)} {adj} {thing[0]} by the {self.place}. The {thing[0]} was {adj}."
        return f"There were {count(n, thing, rng)} by the {self.place}. The {thing[1]} were {adj}."

    def dialogue(self) -> list[str]:
        rng, h, f = self.rng, self.hero, self.friend
        thing = rng.choice(OBJECTS)
        n = rng.randint(1, 9)
        return rng.choice(
            [
                [
                    self.say(h, f"How many {thing[1]} do you have?", asked=True),
                    self.say(f, f"I have {count(n, thing, rng)}."),
                ],
                [
                    self.say(h, f"I like {thing[1]}."),
                    self.say(f, f"I like {thing[1]} too!"),
                    f"{h.name} and {f.name} both liked {thing[1]}.",
                ],
                [
                    self.say(h, f"Look at the {rng.choice(SIZES)} {thing[0]}!"),
                    self.say(f, f"Wow! It is so {rng.choice(COLORS)}!"),
                ],
                [
                    self.say(f, f"{h.name} has {article(self.color)} {self.color} {self.obj[0]}."),
                    self.say(h, f"Yes, I have {article(self.color)} {self.color} {self.obj[0]}."),
                ],
            ]
        )

    def trouble(self) -> list[str]:
        rng, h, f = self.rng, self.hero, self.friend
        o, color = self.obj[0], self.color
        spot = rng.choice(SPOTS)
        feel = rng.choice(["sad", "worried", "scared", "upset"])
        lines = [
            f"But then, the {color} {o} {rng.choice(MISHAPS)}! {h.name} felt very {feel}.",
            self.say(h, f"Where is my {o}?", asked=True),
            self.say(f, f"Do not worry, {h.name}. I will help you find your {o}."),
            f"They looked everywhere. At last, {f.name} found the {color} {o} {spot}.",
            self.say(f, f"Here is your {o}, {h.name}!"),
            self.say(h, f"Thank you, {f.name}! You are a good friend."),
        ]
        return lines

    def ending(self) -> str:
        rng, h, f = self.rng, self.hero, self.friend
        feel = rng.choice(["happy", "glad", "proud", "calm", "tired but happy"])
        lines = [
            rng.choice(
                [
                    f"From that day on, {h.name} and {f.name} were best friends.",
                    f"When the sun went down, {h.name} went home. {cap(h.he)} felt {feel}.",
                    f"That night, {h.name} slept with {h.his} {self.color} {self.obj[0]} next to {h.him}.",
                    f"{h.name} and {f.name} went home, and they were both {feel}.",
                ]
            ),
            "The end.",
        ]
        return " ".join(lines)

    def text(self) -> str:
        rng = self.rng
        parts: list[str] = [self.title(), self.opening(), self.setting(), "\n".join(self.meeting())]
        middle = [self.counting, self.describe, lambda: "\n".join(self.dialogue())]
        rng.shuffle(middle)
        parts += [m() for m in middle[: rng.randint(1, 3)]]
        if rng.random() < 0.7:
            parts.append("\n".join(self.trouble()))
        parts.append(self.ending())
        return "\n\n".join(parts)


def generate(seed: int, size: int) -> str:
    """Whole stories, separated by blank lines, until at least `size` bytes."""
    rng = random.Random(seed)
    stories: list[str] = []
    total = 0
    while total < size:
        story = Story(rng, len(stories) + 1).text()
        stories.append(story)
        total += len(story.encode()) + 2
    return "\n\n".join(stories) + "\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, seed, size in (("train.txt", TRAIN_SEED, TRAIN_BYTES), ("eval.txt", EVAL_SEED, EVAL_BYTES)):
        text = generate(seed, size)
        (OUT / name).write_bytes(text.encode("utf-8"))
        print(f"{OUT / name}: {len(text.encode()):,} bytes, {len(set(text.split())):,} distinct words")


if __name__ == "__main__":
    main()
