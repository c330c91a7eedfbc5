"""The limits every untrusted input is held to before the engine sees it, and where each comes from.

Pods control their own annotations and names, and the runtime, the command line and files supply the rest;
each is checked once where it enters (`podspec` for pods, `agent.plugin` for runtime messages, `cli` for
flags and files) against these numbers, which are the Kubernetes API's own or the machine's. A value that
passes cannot cost more than linear time to parse, cannot exceed what an int64 holds, and can be formatted
into a message; a value that does not is an `InputError` naming the field and the rule.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Final

from podlevel.engine.errors import InputError

MAX_QUANTITY: Final = 2**63 - 1
"""The largest quantity, in the engine's units (bytes, millicores): the API server keeps quantities within
int64 (`resource.Quantity`'s `maxAllowed`) and the kubelet's `Value()`/`MilliValue()` are int64."""
MAX_QUANTITY_EXPONENT: Final = 2**31 - 1
"""The API server parses a quantity's decimal exponent (`1e3`) as an int32 and refuses larger ones."""

MAX_CPUS: Final = 8192
"""CPU ids are below Linux's largest `NR_CPUS` (8192, x86-64 `MAXSMP`): a cpuset of the runtime, the
command line or a file naming a higher id is refused before a bitmask is built for it."""
MAX_NUMA_NODES: Final = 1024
"""NUMA node ids are below Linux's largest `MAX_NUMNODES` (`NODES_SHIFT` 10)."""

MAX_POD_COPIES: Final = 10_000
"""A workload simulated on one node stands for at most this many pods: no kubelet runs more (its `maxPods`
defaults to 110), and `replicas` (an int32) would otherwise make a simulation build two billion pods."""
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024
"""The API server caps all annotations of an object together at 256 KiB (`TotalAnnotationSizeLimitB`), so a
longer pod-shape annotation cannot come from a Pod."""
MAX_NESTING: Final = 64
"""JSON and YAML nesting is refused beyond this depth before it is decoded (a pod shape is 5 deep, a full
Pod manifest rarely 15); Python's decoders recurse per level."""
MAX_INTEGER_DIGITS: Final = 64
"""A YAML or JSON integer of more digits is refused unconverted: no Kubernetes field holds more than an
int64 (19 digits), and converting long digit strings costs quadratic time."""
MAX_FILE_BYTES: Final = 16 * 1024 * 1024
"""Files and standard input are read up to this size: the API server takes at most 3 MiB in one request,
so this holds several hundred Pod manifests, and `/dev/zero` is refused rather than read forever."""

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL: Final = re.compile(_LABEL)
_DNS1123_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_QUALIFIED_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")

_JSON_STRING: Final = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]++")
_BRACKET_STEP: Final = {"[": 1, "{": 1, "]": -1, "}": -1}
_PLAIN: Final = re.compile(r"[-A-Za-z0-9_./:@]*")
QUOTED_MAX: Final = 128
"""Untrusted text quoted in a message or log line is cut to this many characters: a 1 MiB name must not
make every refusal a 1 MiB log line."""


def json_depth(text: str) -> int:
    """How deep JSON `text` nests arrays and objects, without decoding it; at most `MAX_NESTING` + 1 is
    exact when the text has few brackets (the common case is two `str.count` calls)."""
    opening = text.count("[") + text.count("{")
    if opening <= MAX_NESTING:
        return opening
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub('""', text))
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def quote(value: object, limit: int = QUOTED_MAX) -> str:
    """`value` as a Python literal, cut to `limit` characters with the cut said: safe to log, to send over
    NRI and to print (lone surrogates and control characters come out escaped)."""
    if not isinstance(value, str):
        shown = repr(value)
        return shown if len(shown) <= limit else f"{shown[:limit]}... (truncated)"
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value) - limit} more characters, truncated)"


def shown(name: str, limit: int = QUOTED_MAX) -> str:
    """A name from outside for a message or log line: as it is when it is short plain text (what every
    Kubernetes name is), else `quote`d."""
    if len(name) <= limit and _PLAIN.fullmatch(name):
        return name
    return quote(name, limit)


def encodable(text: str) -> bool:
    """Whether `text` can be encoded as UTF-8 (no lone surrogates from a `\\ud800` escape), as every string
    the plugin sends to the runtime or writes to its log must be."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_dns1123_label(value: str, field: str) -> None:
    """The API server's rule for container names and namespaces (`IsDNS1123Label`)."""
    _check_dns1123(value, field, "DNS-1123 label", DNS1123_LABEL_MAX, "lower case letters, digits and '-', "
                   "starting and ending with a letter or digit")


def check_dns1123_subdomain(value: str, field: str) -> None:
    """The API server's rule for pod names (`IsDNS1123Subdomain`)."""
    _check_dns1123(value, field, "DNS-1123 subdomain", DNS1123_SUBDOMAIN_MAX, "'.'-separated DNS-1123 labels")


def _check_dns1123(value: str, field: str, rule: str, longest: int, made_of: str) -> None:
    pattern = _DNS1123_LABEL if longest == DNS1123_LABEL_MAX else _DNS1123_SUBDOMAIN
    if len(value) > longest or not pattern.fullmatch(value):
        raise InputError(rule, f"{field}: {quote(value)} must be at most {longest} characters of {made_of}")


def check_resource_name(value: str, field: str) -> None:
    """The API server's rule for resource names (`IsQualifiedName`): an optional DNS-1123 subdomain prefix
    and '/', then a name of at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    good = (
        len(name) <= DNS1123_LABEL_MAX
        and _QUALIFIED_NAME.fullmatch(name) is not None
        and (not slash or (len(prefix) <= DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(prefix)))
    )
    if not good:
        raise InputError(
            "qualified name",
            f"{field}: resource name {quote(value)} must be [prefix/]name, the name at most "
            f"{DNS1123_LABEL_MAX} characters of letters, digits, '-', '_' and '.'",
        )
