"""Options declared once: a dataclass field carries its command-line flag and help.

A configuration dataclass's field carries its command-line flag and help (:func:`option`),
and :func:`add_options` builds the flags of a parser from the dataclass, so the defaults,
choices and help text of a flag live beside the field they set.

It imports nothing of the project: every part of the configuration (``distgnn.nn.config``,
``distgnn.exchange.config``, ...) declares its fields with it.
"""
from __future__ import annotations

import argparse
import dataclasses


def option(default, help: str, *, flag: str | None = None, action=None, type=None,
           choices=None, metavar: str | None = None, nargs=None, const=None,
           exclusive: str | None = None):
    """A dataclass field defaulting to ``default`` that declares its command-line flag.

    The flag (``flag``, else ``--`` and the field's name with dashes) takes argparse's
    ``action``, ``type``, ``choices``, ``metavar``, ``nargs`` and ``const``, documented by
    ``help``; fields naming the same ``exclusive`` key are mutually exclusive flags."""
    meta = {"help": help, "flag": flag, "action": action, "type": type, "choices": choices,
            "metavar": metavar, "nargs": nargs, "const": const, "exclusive": exclusive}
    return dataclasses.field(default=default, metadata=meta)


def flag_of(field: dataclasses.Field) -> str:
    """The command-line flag of ``field`` (``--checkpoint-dir`` for ``checkpoint_dir``)."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def changed_options(part, only: tuple[str, ...] | None = None) -> list[str]:
    """The options of the dataclass instance ``part`` (those named in ``only``, if given)
    away from their defaults, each as a command line gives it (``--delay 3``,
    ``--no-backward-exchange``): what a refusal of options that would change nothing names."""
    given = []
    for field in dataclasses.fields(part):
        value = getattr(part, field.name)
        if only is not None and field.name not in only or value == field.default:
            continue
        flag = flag_of(field)
        if field.metadata.get("action") is True:  # a switch with a --no- form
            given.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, bool):  # a one-way switch: its flag is the change
            given.append(flag)
        else:
            given.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return given


def add_options(group, cls, only: tuple[str, ...] | None = None, defaults=None) -> None:
    """Add to ``group`` (a parser or an argument group) the flag of every field of the
    dataclass ``cls`` (those named in ``only``, if given), defaulting to ``defaults``'s
    values (default: the fields' own)."""
    exclusive = {}
    for field in dataclasses.fields(cls):
        if only is not None and field.name not in only or "help" not in field.metadata:
            continue
        meta = field.metadata
        key = meta["exclusive"]
        if key is not None and key not in exclusive:
            exclusive[key] = group.add_mutually_exclusive_group()
        target = exclusive[key] if key is not None else group
        kwargs = {k: meta[k] for k in ("action", "type", "choices", "metavar", "nargs",
                                       "const") if meta[k] is not None}
        if kwargs.get("action") is True:  # a switch that has a --no- form
            kwargs["action"] = argparse.BooleanOptionalAction
        target.add_argument(flag_of(field), dest=field.name, help=meta["help"],
                            default=getattr(defaults, field.name, field.default), **kwargs)
