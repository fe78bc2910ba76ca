"""A distribution given on the command line: `--turns 4`, `--turns 2-6`, `--think-time exp:3`.

Session workloads draw several quantities per session or per turn (turns, message and answer
lengths, think times); each option takes one of these forms:

- `V`: always V;
- `A-B`: uniform between A and B (inclusive for whole-number quantities);
- `exp:MEAN`: exponential with that mean (think times: people reply at random moments);
- `lognormal:MEAN,SIGMA`: lognormal with that mean and log-space spread (message lengths:
  mostly short, sometimes a long paste).

`at_least(minimum)` is the options' argparse `type`: a value below `minimum` (a session of 0
turns, a negative think time) or in no known form is refused when the command line is read,
with a message that names the forms, so a bad value never reaches a running user. It keeps
the text (Locust's master sends options to its workers as msgpack, which carries strings);
users parse it with `parse_distribution`. Draws use the caller's `random.Random`, so the same
seed gives the same sessions. Stdlib only.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["constant", "uniform", "exp", "lognormal"]
FORMS = "V, A-B (uniform), exp:MEAN or lognormal:MEAN,SIGMA"


@dataclass(frozen=True, slots=True)
class Distribution:
    """`a`, `b`: the constant (a), the uniform bounds (a <= b), the mean (a) of `exp`, or the
    mean (a) and sigma (b) of `lognormal`. Every draw is >= `minimum`."""

    kind: Kind
    a: float
    b: float = 0.0
    minimum: float = 0.0

    def draw(self, rng: random.Random) -> float:
        if self.kind == "constant":
            value = self.a
        elif self.kind == "uniform":
            value = rng.uniform(self.a, self.b)
        elif self.kind == "exp":
            value = rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0
        else:
            value = rng.lognormvariate(math.log(self.a) - self.b * self.b / 2, self.b)
        return max(self.minimum, value)

    def draw_int(self, rng: random.Random) -> int:
        """A whole number: uniform draws are uniform over the integers A..B."""
        low, high = math.ceil(self.a), math.floor(self.b)
        if self.kind == "uniform" and low <= high:
            return max(math.ceil(self.minimum), rng.randint(low, high))
        return max(math.ceil(self.minimum), round(self.draw(rng)))


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _parse(text: str, minimum: float) -> Distribution:
    body = text.strip().lower()
    if body.startswith("exp:"):
        mean = _number(body[4:])
        if mean < 0:
            raise ValueError("the mean of exp: must be >= 0")
        return Distribution("exp", mean, minimum=minimum)
    if body.startswith("lognormal:"):
        mean, sigma = (_number(part) for part in body[len("lognormal:") :].split(","))
        if mean <= 0 or sigma < 0:
            raise ValueError("lognormal needs MEAN > 0 and SIGMA >= 0")
        return Distribution("lognormal", mean, sigma, minimum)
    low, sep, high = body.partition("-") if not body.startswith("-") else (body, "", "")
    if sep:
        a, b = _number(low), _number(high)
        if b < a:
            raise ValueError(f"the range {text!r} runs backwards")
        if a < minimum:
            raise ValueError(f"the range starts below {minimum:g}")
        return Distribution("uniform", a, b, minimum)
    value = _number(body)
    if value < minimum:
        raise ValueError(f"must be at least {minimum:g}")
    return Distribution("constant", value, minimum=minimum)


def parse_distribution(text: str, minimum: float = 0.0) -> Distribution:
    """The distribution `text` describes; ArgumentTypeError (argparse prints its message
    with the flag) when it describes none or allows draws below `minimum`."""
    try:
        return _parse(str(text), minimum)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc} (forms: {FORMS})") from None


def at_least(minimum: float) -> Callable[[str], str]:
    """An argparse type that checks a distribution's text (draws >= `minimum`) and keeps it."""

    def distribution(text: str) -> str:
        parse_distribution(text, minimum)
        return str(text)

    return distribution
