"""Run options written once: each command's config is a dataclass whose fields carry their flag,
help text and parser; :func:`add_options` builds the argparse flags from it and :func:`from_args`
builds the config from the parsed flags, so the CLI and the Python API share defaults and checks.

A field made with :func:`option` becomes ``--field-name`` (or ``flag``); its CLI text goes through
``parse`` (default: the field's own type) and any ``ValueError`` is raised again naming the flag.
A field without a default is a required flag. ``invert=True`` makes a ``True`` boolean a
``--flag`` that turns it off (``batched`` / ``--sequential``). A value starting with ``~`` is the
path it names (``--out=~/x``: the shell expands no ``~`` after ``=``), as ``os.path.expanduser``.

The scripts and benchmarks build their flags the same way: a small config of their own whose shared
fields are the package's (:func:`reuse`: ``--model``'s help is ``ModelOptions``'s, the default the
script's), read by :func:`from_argv`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import checks

# Since 0.3.0 no renamed name or moved module path is kept as an alias (CHANGELOG.md lists each with
# its replacement); what still warns is a spelling: advise's hidden ``--check-length`` (OldSpelling),
# ``AdviseConfig(check_length=...)`` and the advise candidates' old ``(length, trained)`` call form.
REMOVAL = "0.4.0"  # the release that removes the old spellings above


def deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """The one warning every old spelling gives: what replaces it and the release that removes it."""
    import warnings

    warnings.warn(f"{old} is deprecated; use {new} (removed in {REMOVAL})", DeprecationWarning, stacklevel=stacklevel)


Parser = Callable[[str], Any]
T = TypeVar("T")
_SAME: Any = object()  # reuse: keep the field's own default


def _int(text: str) -> int:
    """An ``int`` field's flag."""
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected an integer") from None


def _float(text: str) -> float:
    """A ``float`` field's flag."""
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


_TYPED: dict[str, Parser] = {"int": _int, "float": _float}  # the parser of a field so annotated, without its own


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    flag: str | None = None,
    parse: Parser | None = None,
    metavar: str | None = None,
    invert: bool = False,
    positional: bool = False,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A dataclass field with its CLI flag: ``help`` is the flag's text (the default is appended).
    ``aliases``: old spellings of the flag, kept hidden from ``--help``; each still works and says
    on stderr that it is deprecated (:class:`OldSpelling`)."""
    meta: dict[str, Any] = {
        "help": help,
        "flag": flag,
        "parse": parse,
        "metavar": metavar,
        "invert": invert,
        "positional": positional,
    }
    if aliases:
        meta["aliases"] = tuple(aliases)
    if isinstance(default, (list, dict, set)):
        raise TypeError("option defaults must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata={"cli": meta})


def reuse(cls: type, name: str, default: Any = _SAME) -> Any:
    """The option field ``name`` of ``cls`` for another config: the same help text and parser (and
    flag, where it names one; else the new field's name makes it), with ``default`` where given (a
    note on the old default closing the help is dropped, as the new one is shown)."""
    f = next((f for f in _cli_fields(cls) if f.name == name), None)
    if f is None:
        raise TypeError(f"{cls.__name__} has no option {name!r}")
    meta = dict(f.metadata["cli"])
    meta["parse"] = meta["parse"] or _TYPED.get(str(f.type))  # the new field's annotation may differ
    if default is _SAME:
        default = f.default
    elif default != f.default:
        meta["help"] = re.sub(r"\s*\(default: [^()]*\)$", "", meta["help"])
    return option(default, **meta)


def from_argv(cls: type[T], argv: Sequence[str] | None = None, description: str | None = None) -> T:
    """A script's config from its command line (``sys.argv`` without ``argv``): one flag per option
    field of ``cls`` (:func:`add_options`), read by :func:`from_args`. A value the config refuses
    exits as argparse's own errors do: the usage, the message naming the flag, exit code 2."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser, cls)
    args = parser.parse_args(argv)
    try:
        return from_args(cls, args)
    except ValueError as exc:
        parser.error(str(exc))


def _cli_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if "cli" in f.metadata]


def flag_of(f: dataclasses.Field) -> str:
    """The flag of a field: ``flag`` as given, else ``--`` and its name with dashes."""
    meta = f.metadata["cli"]
    if meta["positional"]:
        return f.name
    return meta["flag"] or "--" + f.name.replace("_", "-")


def show(value: Any) -> str:
    """A default as the user would type it: tuples as comma lists."""
    if isinstance(value, tuple):
        return ",".join(show(v) for v in value)
    return format(value, "g") if isinstance(value, float) else str(value)


def add_options(parser: argparse.ArgumentParser, cls: type, defaults: dict[str, str] | None = None) -> None:
    """Add one flag per option field of ``cls``. ``defaults`` overrides the text shown for a
    default (e.g. per-model defaults); the value itself stays the dataclass's."""
    for f in _cli_fields(cls):
        meta = f.metadata["cli"]
        shown = (defaults or {}).get(f.name)
        if shown is None and f.default is not dataclasses.MISSING and not meta["invert"]:
            shown = show(f.default) if f.default is not None else None
        text = meta["help"] + (f" (default: {shown})" if shown else "")
        if meta["positional"]:
            parser.add_argument(f.name, help=text, metavar=meta["metavar"])
        elif meta["invert"] or f.type in (bool, "bool"):
            parser.add_argument(flag_of(f), dest=f.name, action="store_true", default=argparse.SUPPRESS, help=text)
        else:
            required = f.default is dataclasses.MISSING
            metavar = meta["metavar"] or flag_of(f).lstrip("-").upper().replace("-", "_")
            parser.add_argument(
                flag_of(f), dest=f.name, required=required, default=argparse.SUPPRESS, metavar=metavar, help=text,
                action=NewSpelling if meta.get("aliases") else "store",
            )  # fmt: skip
            for old in meta.get("aliases", ()):
                parser.add_argument(
                    old, dest=f.name, default=argparse.SUPPRESS, metavar=metavar, help=argparse.SUPPRESS,
                    action=OldSpelling, new=flag_of(f),
                )  # fmt: skip


SPELLED = "_old_spellings"  # on the parsed namespace: {field: (old flag, its deprecation line)}


def _both(parser: argparse.ArgumentParser, old: str, old_value: Any, new: str, new_value: Any) -> None:
    """Refuse a flag given in both spellings: which should win is the user's to say, not argparse's
    (the last one given)."""
    parser.error(
        f"{old}={old_value} is not allowed with {new}={new_value}: {old} is the old spelling of {new}; give {new} only"
    )


class NewSpelling(argparse._StoreAction):
    """A flag that has old spellings (:class:`OldSpelling`): refused when one of them was given too."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None):
        spelled = getattr(namespace, SPELLED, {})
        if self.dest in spelled:
            _both(parser, spelled[self.dest][0], getattr(namespace, self.dest), option_string, values)
        setattr(namespace, self.dest, values)


class OldSpelling(argparse.Action):
    """A flag's old spelling: stores the value under the new flag's field; the line on stderr saying
    that the old spelling is deprecated (removed in the release :data:`REMOVAL` names) comes
    when the config is built (:func:`given`), so a refusal of both spellings together
    (:class:`NewSpelling`) is the only line."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "", **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None):
        spelled = getattr(namespace, SPELLED, {})
        if hasattr(namespace, self.dest) and self.dest not in spelled:  # the new spelling came first
            _both(parser, option_string, values, self.new, getattr(namespace, self.dest))
        line = f"{parser.prog}: warning: {option_string} is deprecated; use {self.new} (removed in {REMOVAL})"
        setattr(namespace, SPELLED, {**spelled, self.dest: (option_string, line)})
        setattr(namespace, self.dest, values)


def _convert(f: dataclasses.Field, raw: Any) -> Any:
    meta = f.metadata["cli"]
    if meta["invert"]:
        return not raw
    if not isinstance(raw, str):
        return raw
    raw = os.path.expanduser(raw) if raw.startswith("~") else raw  # --out=~/x: no shell expanded it
    parse = meta["parse"] or _TYPED.get(str(f.type))
    if parse is None:
        return raw
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"{flag_of(f)} {raw!r}: {exc}") from None


def given(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The option fields of ``cls`` that were given on the command line, converted; an old
    spelling among them is said deprecated on stderr (once)."""
    for _, line in getattr(args, SPELLED, {}).values():
        print(line, file=sys.stderr)
    if hasattr(args, SPELLED):
        delattr(args, SPELLED)
    return {f.name: _convert(f, getattr(args, f.name)) for f in _cli_fields(cls) if hasattr(args, f.name)}


def from_args(cls: type, args: argparse.Namespace, build: Callable[..., Any] | None = None) -> Any:
    """``cls`` (or ``build(**values)``) from the flags that were given; the rest keep the
    dataclass's defaults. A ValueError from the config's own checks is raised again naming the
    flag when it names a field."""
    values = given(cls, args)
    try:
        return (build or cls)(**values)
    except ValueError as exc:
        raise ValueError(_name_flag(str(exc), _cli_fields(cls))) from None


def _name_flag(message: str, fields: Sequence[dataclasses.Field]) -> str:
    """``"n_docs=0 is not allowed..."`` -> ``"--docs=0 is not allowed..."`` (the field's name
    becomes its flag wherever the message starts with it; a switch given, ``"x=True ..."``, its flag
    alone: ``"--x ..."``)."""
    for f in sorted(fields, key=lambda f: -len(f.name)):
        switch = f.type in (bool, "bool") and not f.metadata["cli"]["invert"]
        if switch and message.startswith(f"{f.name}=True"):
            return flag_of(f) + message[len(f.name) + len("=True") :]
        if message.startswith((f"{f.name}=", f"{f.name}[", f"{f.name} ")):
            return flag_of(f) + message[len(f.name) :]
    return message


# ----------------------------------------------------------------------------- parsers
def ints(text: str) -> tuple[int, ...]:
    """``"512,1024"`` -> ``(512, 1024)``."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError("expected comma-separated integers") from None


def floats(text: str) -> tuple[float, ...]:
    """``"4,8"`` -> ``(4.0, 8.0)``."""
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError("expected comma-separated numbers") from None


def names(text: str) -> tuple[str, ...]:
    """``"none,yarn"`` -> ``("none", "yarn")`` (checked by the config against what is allowed)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


MAX_MULTIPLIERS = 1000  # one sweep point each; a range past this is a typo in STEP
# A logit multiplier outside this range is a typo: at m = 1e-3 attention is uniform to 3 digits, at
# 1e3 one-hot; 1e-320 (a denormal) would round the logits to 0.
MULTIPLIER_RANGE = (1e-3, 1e3)
SANE = ": outside it attention is uniform or one-hot"


def check_multiplier(name: str, value: Any) -> float:
    """``value`` as a float, refused unless a finite number in :data:`MULTIPLIER_RANGE`."""
    return checks.within(name, value, *MULTIPLIER_RANGE, why=SANE)


def multipliers(text: str) -> tuple[float, ...]:
    """``"0.8:1.4:0.05"`` (inclusive range) or ``"0.8,1,1.2"`` -> sorted multipliers (m = 1/T)."""
    try:
        if ":" in text:
            lo, hi, step = (float(x) for x in text.split(":"))
            if step <= 0 or hi < lo:
                raise ValueError
            n = round((hi - lo) / step)
        else:
            values = [float(x) for x in text.split(",") if x.strip()]
            n = len(values) - 1
    except (ValueError, OverflowError):
        raise ValueError(f"multipliers={text!r} is not allowed; expected LO:HI:STEP or a comma list") from None
    if n + 1 > MAX_MULTIPLIERS:
        raise ValueError(f"{n + 1:.3g} values; at most {MAX_MULTIPLIERS} (use a larger STEP)")
    if ":" in text:
        values = [round(lo + i * step, 6) for i in range(n + 1)]
    for i, v in enumerate(values):
        check_multiplier(f"multipliers[{i}]", v)
    return tuple(sorted(set(values)))
