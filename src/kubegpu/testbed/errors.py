"""Errors the testbed raises: bad input (nothing touched yet) and failures while building."""

from __future__ import annotations

from kubegpu.errors import InputError


class TestbedInputError(InputError):
    """Bad input or an unusable host, found before anything was created."""

    __test__ = False  # not a pytest test class, despite the name


class TestbedError(RuntimeError):
    """A step of bringing the testbed up or down failed; the message says which and why."""

    __test__ = False
