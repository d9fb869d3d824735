"""Errors the API raises before any host is touched."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input to an entry point: names what was wrong and what is allowed."""

    def __init__(self, variable: str, problem: str, allowed: str = "") -> None:
        self.variable = variable
        self.problem = problem
        self.allowed = allowed
        text = f"{variable}: {problem}"
        if allowed:
            text += f" (allowed: {allowed})"
        super().__init__(text)
