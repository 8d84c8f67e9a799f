"""Names, words and numbers the task templates of several suites draw from."""

from __future__ import annotations

import random

PEOPLE = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jia", "Kofi", "Lena"]
WORDS = ["budget", "meeting", "draft", "release", "invoice", "lunch", "review", "deadline", "launch", "backup"]
PHRASES = ["see you at the {w}", "the {w} is ready", "can we move the {w}?", "thanks for the {w}", "reminder about the {w}"]


def money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def sentence(rng: random.Random) -> str:
    return rng.choice(PHRASES).format(w=rng.choice(WORDS))


def number(rng: random.Random) -> float:
    return round(rng.uniform(2, 500), rng.choice([0, 1, 2]))
