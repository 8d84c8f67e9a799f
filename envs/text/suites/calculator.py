"""A calculator with one memory register (so that calls have a checkable effect)."""

from __future__ import annotations

import math
import random
from typing import Any, cast

from envs.text.parsing import ToolCall
from envs.text.suites.base import C, Draft, SuiteDefinition, ToolError, ToolSuite, World, read_only
from envs.text.suites.words import number

_MAX_MAGNITUDE = 1e300  # past this, results are inf/overflow: refuse instead of returning nonsense


def _finite(value: float) -> float:
    if not math.isfinite(value) or abs(value) > _MAX_MAGNITUDE:
        raise ToolError("result is too large or not a number")
    return value


class Calculator(ToolSuite):
    """Arithmetic on floats; ``memory`` is its only state."""

    name = "calculator"
    description = "arithmetic and a memory register"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"memory": 0.0}

    def _load(self, config: dict[str, Any]) -> None:
        self.memory: float = float(config["memory"])

    @read_only
    def add(self, a: float, b: float) -> float:
        """Return a + b.

        Args:
            a: First addend.
            b: Second addend.
        """
        return _finite(a + b)

    @read_only
    def subtract(self, a: float, b: float) -> float:
        """Return a - b.

        Args:
            a: Number to subtract from.
            b: Number to subtract.
        """
        return _finite(a - b)

    @read_only
    def multiply(self, a: float, b: float) -> float:
        """Return a * b.

        Args:
            a: First factor.
            b: Second factor.
        """
        return _finite(a * b)

    @read_only
    def divide(self, a: float, b: float) -> float:
        """Return a / b.

        Args:
            a: Dividend.
            b: Divisor, not zero.
        """
        if b == 0:
            raise ToolError("division by zero")
        return _finite(a / b)

    @read_only
    def power(self, base: float, exponent: float) -> float:
        """Return base raised to exponent.

        Args:
            base: The base.
            exponent: The exponent.
        """
        try:
            return _finite(math.pow(base, exponent))  # float pow: never a huge exact integer
        except (OverflowError, ValueError) as exc:
            raise ToolError(str(exc)) from None

    @read_only
    def square_root(self, x: float) -> float:
        """Return the square root of a non-negative number.

        Args:
            x: Number, at least 0.
        """
        if x < 0:
            raise ToolError("square root of a negative number")
        return math.sqrt(x)

    @read_only
    def mean(self, numbers: list[float]) -> float:
        """Return the arithmetic mean of a list of numbers.

        Args:
            numbers: At least one number.
        """
        if not numbers:
            raise ToolError("mean of an empty list")
        return _finite(math.fsum(numbers) / len(numbers))

    @read_only
    def round_number(self, x: float, digits: int = 0) -> float:
        """Round a number to a given count of decimal digits.

        Args:
            x: Number to round.
            digits: Decimal digits to keep, between 0 and 10.
        """
        if not 0 <= digits <= 10:
            raise ToolError("digits must be between 0 and 10")
        return round(x, digits)

    def memory_store(self, value: float) -> float:
        """Store a number in memory (replacing what was there) and return it.

        Args:
            value: Number to store.
        """
        self.memory = _finite(value)
        return self.memory

    def memory_add(self, value: float) -> float:
        """Add a number to the value in memory and return the new memory value.

        Args:
            value: Number to add.
        """
        self.memory = _finite(self.memory + value)
        return self.memory

    @read_only
    def memory_recall(self) -> float:
        """Return the value in memory."""
        return self.memory


# ---- initial states and task templates (drawn by envs.text.tasks) ----------------------------


def calculator_of(world: World) -> Calculator:
    """The world's calculator suite, typed (``world.suites`` holds ``ToolSuite``)."""
    return cast(Calculator, world.suites["calculator"])


def initial_config(rng: random.Random, long: bool) -> dict[str, Any]:
    """A task's initial state (``long``: the long-context variant's larger one)."""
    return {"memory": float(rng.randint(0, 50))}


def calc_multiply(rng: random.Random, world: World) -> Draft:
    a, b = number(rng), number(rng)
    return Draft(f"What is {a} times {b}?", [C("multiply", a=a, b=b)])


def calc_add_to_memory(rng: random.Random, world: World) -> Draft:
    a, b = number(rng), number(rng)
    return Draft(
        f"Add {a} and {b}, then add the result to the memory.",
        [C("add", a=a, b=b), C("memory_add", value=a + b)],
        vague=f"Add {a} to some number, then add the result to the memory.",
        clarification=f"The other number is {b}.",
    )


def calc_power_round(rng: random.Random, world: World) -> Draft:
    base, exponent = round(rng.uniform(1.1, 3.0), 3), rng.randint(2, 6)
    result = calculator_of(world).power(base, float(exponent))
    return Draft(
        f"Compute {base} to the power {exponent}, rounded to 2 decimal places.",
        [C("power", base=base, exponent=float(exponent)), C("round_number", x=result, digits=2)],
    )


def calc_store(rng: random.Random, world: World) -> Draft:
    a, b = number(rng), rng.choice([3.0, 4.0, 7.0, 8.0])
    return Draft(
        f"Divide {a} by {b} and store the result in memory.",
        [C("divide", a=a, b=b), C("memory_store", value=a / b)],
        vague=f"Divide {a} by something and store the result in memory.",
        clarification=f"Divide it by {b}.",
    )


def calc_mean(rng: random.Random, world: World) -> Draft:
    numbers = [number(rng) for _ in range(rng.randint(3, 6))]
    return Draft(
        f"What is the mean of {numbers}? And what is in the memory?", [C("mean", numbers=numbers), C("memory_recall")]
    )


def calc_mean_long(rng: random.Random, world: World) -> Draft:
    numbers = [number(rng) for _ in range(150)]  # a long input rather than a long output
    return Draft(f"What is the mean of these numbers: {numbers}?", [C("mean", numbers=numbers)], long_output=True)


def distractor(config: dict[str, Any]) -> ToolCall:
    """A call that always succeeds and always changes the state (the noisy policy's "extra call")."""
    return ToolCall("memory_add", {"value": 1.0})


SUITE = SuiteDefinition(
    tools=Calculator,
    initial_config=initial_config,
    templates=(
        calc_multiply,
        calc_add_to_memory,
        calc_power_round,
        calc_store,
        calc_mean,
    ),
    long_templates=(calc_mean_long,),
    distractor=distractor,
)
