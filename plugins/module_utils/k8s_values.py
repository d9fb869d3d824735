# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes values checked the way the API server checks them, and Ansible text read the way
Ansible reads it: shared by the gpu_cluster and gpu_tenancy settings.

- parse_quantity(text): a resource quantity as an exact Fraction (k8s.io/apimachinery's
  resource.Quantity grammar); as_quantity, whole_quantity_error.
- is_dns_label, is_dns_subdomain, qualified_name_error, label_value_error,
  extended_resource_error: object names, label keys and values, extended resource names.
- coerce_int, coerce_bool: digits and true/false given as text (extra vars are text).

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import re
from fractions import Fraction

__metaclass__ = type

# --- quantities ----------------------------------------------------------------------------------

# Matched against the whole text (fullmatch): a "$" would let a trailing line break through.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE]|)"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_quantity(text):
    """A Kubernetes resource quantity ("8", "500m", "1.5Gi", "1e3") as an exact Fraction.

    Follows the grammar of k8s.io/apimachinery's resource.Quantity: a signed decimal number
    followed by a binary SI suffix (Ki..Ei), a decimal SI suffix (m, k, M..E) or a decimal
    exponent (e3, E-2). Raises ValueError with the reason for anything else, including integers
    and floats given as YAML numbers (the Kubernetes Python client 37 rejects those).
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(
            '%r is a %s, not a string: write quantities quoted, e.g. "%s"'
            % (text, type(text).__name__, text)
        )
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError(
            "%r is not a Kubernetes quantity (a number with an optional suffix: m, k, M, G, T, "
            "P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)" % text
        )
    try:
        number = Fraction(match.group("number"))
    except ValueError:
        # int() refuses a text of over 4300 digits, far beyond the 2^63-1 Kubernetes caps at.
        raise ValueError("%r has too many digits for a Kubernetes quantity" % (text,)) from None
    if match.group("sign") == "-":
        number = -number
    suffix = match.group("suffix")
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix]


def as_quantity(value):
    """An integer written without quotes becomes its string; anything else is left as it is
    (parse_quantity rejects floats and booleans, whose text form is ambiguous)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def whole_quantity_error(value, what):
    """None when value is a quantity that is a whole number of 0 or more, else the reason
    (`what` names the things counted: GPUs, pods)."""
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        return str(exc)
    if amount < 0 or amount.denominator != 1:
        return "%r is not a whole number of 0 or more (%s are counted in whole units)" % (
            value,
            what,
        )
    return None


# --- names ---------------------------------------------------------------------------------------

# Each matched against the whole text (fullmatch), never with "$", which lets "name\n" through.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def is_dns_label(name):
    return isinstance(name, str) and len(name) <= 63 and bool(_DNS_LABEL.fullmatch(name))


def is_dns_subdomain(name):
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(name))


def qualified_name_error(key):
    """None for a valid label/taint/annotation key ([prefix/]name), else why not."""
    if not isinstance(key, str) or not key:
        return "%r is not a non-empty string" % (key,)
    prefix, _, name = key.rpartition("/")
    if "/" in key and not is_dns_subdomain(prefix):
        return "prefix %r of %r is not a DNS subdomain (lower case, digits, '-', '.')" % (
            prefix,
            key,
        )
    if len(name) > 63 or not _NAME_PART.fullmatch(name):
        return (
            "name part %r of %r must be 1-63 characters, alphanumeric at both ends, with "
            "'-', '_', '.' inside" % (name, key)
        )
    return None


def label_value_error(value):
    if not isinstance(value, str):
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return '%r is a %s, not a string: quote it ("%s")' % (value, type(value).__name__, text)
    if value and (len(value) > 63 or not _NAME_PART.fullmatch(value)):
        return (
            "%r must be empty or 1-63 characters, alphanumeric at both ends, with '-', '_', "
            "'.' inside" % value
        )
    return None


def extended_resource_error(name):
    if not isinstance(name, str) or "/" not in name:
        return "%r is not an extended resource name (domain/name, e.g. nvidia.com/gpu)" % (name,)
    error = qualified_name_error(name)
    if error:
        return error
    if name.split("/", 1)[0] in ("kubernetes.io", "k8s.io") or name.split("/", 1)[0].endswith(
        (".kubernetes.io", ".k8s.io")
    ):
        return "%r is in a Kubernetes-reserved domain, not an extended resource" % name
    return None


def json_pointer_escape(key):
    return key.replace("~", "~0").replace("/", "~1")


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
# ASCII digits only (str.isdigit() and int() also take fullwidth and other scripts' digits), and
# no more than an int64 holds (int() refuses a text of over 4300 digits).
_DIGITS = re.compile(r"[0-9]{1,18}")


def coerce_int(value):
    """Digits given as text (extra vars on the command line are text) become an int."""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return value


def coerce_bool(value):
    """true/false given as text become booleans, as Ansible reads them; others stay."""
    if isinstance(value, str):
        if value.strip().lower() in _TRUE:
            return True
        if value.strip().lower() in _FALSE:
            return False
    return value
