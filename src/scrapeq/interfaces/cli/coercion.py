"""Option values coerced without pydantic where typer's own coercion answers the same.

typer 0.29 coerces the value of each parameter a command parses (an option or an argument,
``--help`` and the global ``-v`` count included, a missing value too) with a pydantic
``TypeAdapter`` it builds on first use: importing pydantic and building the adapters cost
~0.07 s of a command's start (issue 38, item 18; docs/BENCHMARKS.md, section 18). The
values our commands take are plain: none, a string, a list of strings, a whole number, a
path, or what a parser of ours returns. :func:`install` gives each parameter a coercion
that answers those as typer's would, without pydantic, and hands any other value (a bad or
signed number, a number out of range, a parser's refusal, a bool from the environment) to
typer's own coercion, built then: its result and its messages are typer's.
tests/interfaces/test_cli_coercion.py compares the two over every parameter of the tree.

Other typer versions (before 0.29: no pydantic, no ``typer._coercion``) are left as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_origin

try:
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_path
except ImportError:  # pragma: no cover - typer < 0.29 coerces without pydantic
    RuntimeParam = None  # type: ignore[assignment,misc]

__all__ = ["install"]

#: A rule's answer for a value it does not know: typer's coercion decides.
_UNKNOWN: Any = object()

#: A rule: (value, parameter, context) -> the value coerced, or :data:`_UNKNOWN`.
Rule = Callable[[Any, Any, Any], Any]


def install(command: Any) -> None:
    """Give each parameter of ``command`` and its subcommands (their ``--help`` included) a
    coercion that tries its rule first (one whose coercion typer already built keeps it)."""
    if RuntimeParam is None:  # pragma: no cover
        return
    params = list(getattr(command, "params", []))
    help_option = getattr(command, "get_help_option", None)
    if callable(help_option):
        params.append(help_option(command.context_class(command)))
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if isinstance(descriptor, TypeDescriptor) and param._runtime_param is None:
            param._runtime_param = _Fast(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                rule=_rule(descriptor),
            )
    for child in getattr(command, "commands", {}).values():
        install(child)


def _rule(descriptor: Any) -> Rule:
    """The rule of a parameter. One no rule fits (a bool, a list of numbers) leaves every
    value given to typer: a missing one (None) is answered before any rule, as typer does."""
    info = descriptor.parameter_info
    annotation = descriptor.annotation
    if descriptor.file_annotation is not None or get_origin(annotation) not in (None, list):
        return _no_rule
    if info.parser is not None:
        return _no_rule if get_origin(annotation) is not None else _parsed(info.parser)
    if annotation is str:
        return _string
    if annotation == list[str]:
        return _strings
    if annotation is int and not info.clamp:
        return functools.partial(_whole, minimum=info.min, maximum=info.max)
    if annotation is Path and info.path_type is None:
        return functools.partial(_path, info=info)
    return _no_rule


def _no_rule(value: Any, param: Any, ctx: Any) -> Any:
    return _UNKNOWN


def _parsed(parser: Callable[[Any], Any]) -> Rule:
    """typer's adapter answers what the parser returns: so does this rule."""

    def parse(value: Any, param: Any, ctx: Any) -> Any:
        try:
            return parser(value)
        except Exception:  # typer runs the parser again and reports it its own way
            return _UNKNOWN

    return parse


def _string(value: Any, param: Any, ctx: Any) -> Any:
    return value if type(value) is str else _UNKNOWN


def _strings(value: Any, param: Any, ctx: Any) -> Any:
    if isinstance(value, list | tuple) and all(type(item) is str for item in value):
        return list(value)
    return _UNKNOWN


def _whole(
    value: Any, param: Any, ctx: Any, *, minimum: float | None, maximum: float | None
) -> Any:
    """A whole number given as one (the ``-v`` count) or in ASCII digits, in its bounds
    (pydantic reads the same digits as the same number; a sign, spaces or ``_`` go to typer)."""
    if type(value) is str and value.isascii() and value.isdigit() and len(value) <= 100:
        value = int(value)
    if type(value) is not int:
        return _UNKNOWN
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        return _UNKNOWN
    return value


def _path(value: Any, param: Any, ctx: Any, *, info: Any) -> Any:
    """typer's adapter makes a ``Path`` of a string with pydantic (``Path(value)``), then
    checks it (``coerce_cli_path``), naming the string in its messages: the same, when the
    string is the path's own spelling (not ``dir/``, which goes to typer)."""
    if type(value) is str and str(Path(value)) == value:
        value = Path(value)
    if type(value) is not type(Path()):
        return _UNKNOWN
    return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)


@functools.cache
def _typer_coercion(descriptor: Any) -> Any:
    return build_runtime_param(descriptor)


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _Fast(RuntimeParam):
        """A parameter's coercion: its rule, else typer's (``RuntimeParam.coerce`` has
        already answered a missing value and refused a string where a list goes)."""

        rule: Rule

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            coerced = self.rule(value, param, ctx)
            if coerced is not _UNKNOWN:
                return coerced
            typer_own = _typer_coercion(param.type_descriptor)
            return typer_own._coerce_value(value, param=param, ctx=ctx)
