"""Prompt text of a chosen length, from words that are one token each in common tokenizers.

Every word below is among the most frequent English words, which byte-pair vocabularies
(GPT-2, Llama 3, Mistral, SmolLM2) keep as one token with their leading space; checked
against SmolLM2's vocabulary (1,000 words -> 1,000 tokens), so N words are ~N tokens before
any chat template. Servers with other tokenizers
(e.g. the byte-level tiny-random model) are handled by `calibration.py`, which measures
tokens per word against the server's own `usage`.

Texts are drawn from a seeded `random.Random`, so the same seed gives byte-identical text on
every worker process — the property shared prefixes need to be shared across workers.
"""

from __future__ import annotations

import random

WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        """
the of and to in is was for that with on as by at from his her they this had not are but
one all were when there can more time who will what about said some would other into has
her two like him see could no than first been its now people my made over did down only way
find use may water long little very after called just where most know get through back
much go good new write our me man too any day same right look think also around another
came come work three word must because does part even place well such here take why things
help put years different away again off went old number great tell men say small every
found still between name should home big give air line set own under read last never us
left end along while might next sound below saw something thought both few those always
looked show large often together asked house world going want school important until form
food keep children feet land side without boy once animals life enough took sometimes four
head above kind began almost live page got earth need far hand high year mother light parts
country father let night following picture being study second eyes soon times story boys
since white days ever paper hard near sentence better best across during today others
however sure means knew try told young miles sun ways thing whole hear example heard several
change answer room sea against top turned learn point city play toward five using himself
usually money seen car morning body upon family later move face door cut done group true
leave color red friends easy fire open table short order east top bring green south mind
stand black west north rest turn free ground wind idea field plan walk road book dog fish
horse river class power cold late happy state game music moon class rain step test bird
ready tree star town fast field market early list power cover board price wall sign cat
""".split()
    )
)  # dict.fromkeys: de-duplicated, order kept


def words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(max(0, count))]


def text(rng: random.Random, count: int) -> str:
    """`count` words joined by spaces (the first has no leading space, as in a real prompt)."""
    return " ".join(words(rng, count))


def seeded_text(seed: int, count: int) -> str:
    """Text that depends only on (seed, count): the same on every worker and every run."""
    return text(random.Random(seed), count)
