"""One statement per setting: the ``*Options`` attrs classes of the servers declare each
setting once (default, flag, help, unit, environment variable, range, why this
default), and the ``hami <command>`` click options are generated from them.

kopf's per-setting documentation is the model: a setting says what it does, in which
unit, and why its default is what it is. A field declared with ``setting(...)`` is a
command-line option; a plain attrs field is not (set only by code)::

    @attrs.frozen(kw_only=True)
    class ServerOptions:
        port: int = setting(8888, help="Extender port.", min=1, max=65535)
        lease_duration_s: float = setting(
            15.0, flag="--lease-duration", unit="seconds", help="...", why="..."
        )

    @cli.command()
    @click_options(ServerOptions)
    def serve(**opts): run(ServerOptions(**opts))

Bad values stop the command at start with the flag named (click's usage error, exit
status 2), before anything is contacted.

Where the settings are (this module is only the machinery; it knows no setting):

- ``hami_core.servers.options``: the four server processes' classes (``hami scheduler``,
  ``webhook``, ``device-plugin``, ``monitor``) and the setting builders several
  commands share (``kubeconfig_setting``, ``config_file_setting``, ``policy_text``,
  ``label_pairs``, ...). It lives beside the servers it configures yet imports nothing
  of their extras (flask, grpc, prometheus_client), so every ``--help`` works without
  them and the client commands may import it;
- ``hami_core.options``: the client commands' classes (``hami top``, ``hami
  simulate``), built from those shared builders, and ``all_commands`` (every command
  and its class: ``docs/settings.md`` is generated from it by
  ``scripts/gen-settings-doc.py``).

A new setting is one ``setting(...)`` field in its command's class; a new command's
class goes in the module of its kind and into ``all_commands``.

A boolean setting is a ``--x/--no-x`` flag pair; ``SettingsCommand`` also takes Go's
spelling ``--x=false`` / ``--x=true`` (HAMi's flags are Go ``flag`` / pflag booleans:
``--force-overwrite-default-scheduler=false``), so a HAMi command line carries over.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import attrs
import click

from hami_core.errors import HamiError

F = TypeVar("F", bound=Callable[..., Any])

#: The attrs metadata key under which a field's ``Setting`` is kept.
KEY = "hami.setting"


@attrs.frozen(kw_only=True)
class Setting:
    """What the command line shows and checks of one field.

    Attributes:
        help: what the setting does (one or two sentences).
        flags: the option names, e.g. ``("--port", "--metrics-port")``; the first is the
            flag that names the setting in messages.
        unit: the unit of the value (``seconds``), shown in ``--help``; "" for none.
        env: the environment variable read when the flag is absent, or "".
        why: why the default is what it is (a source, a limit it must respect).
        show_default: text shown instead of the default (a computed default), or "".
        min, max: the range of a number (inclusive), None for open.
        choices: the allowed values of a string, or ().
        multiple: the flag may repeat; the value is a tuple.
        required: the flag (or ``env``) must be given.
        convert: turns the flag's text into the field's value; raises ``ValueError``
            or ``HamiError`` with the reason (shown with the flag named).
        metavar: the placeholder shown in ``--help``, or "".
        kind: a click type for the flag (e.g. ``click.Path(exists=True)``), or None to
            derive it from the field's type, ``min`` / ``max`` and ``choices``.
    """

    help: str
    flags: tuple[str, ...]
    unit: str = ""
    env: str = ""
    why: str = ""
    show_default: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    multiple: bool = False
    required: bool = False
    convert: Callable[[Any], Any] | None = None
    metavar: str = ""
    kind: Any = None


def setting(
    default: Any = attrs.NOTHING,
    *,
    help: str,
    flag: str | Sequence[str] = "",
    unit: str = "",
    env: str = "",
    why: str = "",
    show_default: str = "",
    min: float | None = None,
    max: float | None = None,
    choices: Sequence[str] = (),
    multiple: bool = False,
    convert: Callable[[Any], Any] | None = None,
    metavar: str = "",
    kind: Any = None,
    factory: Callable[[], Any] | None = None,
    validator: Callable[[Any, Any, Any], None] | None = None,
) -> Any:
    """An attrs field that is also a command-line option (see the module docstring).

    Args:
        default: the default value; omitted (with no ``factory``) for a required
            setting.
        flag: the option name(s); default ``--<field name with dashes>``.
        factory: a default built per instance (for mutable defaults).
        validator: an attrs validator, run when the class is built (by code too).
        The rest: as the attributes of ``Setting``.
    """
    flags = (flag,) if isinstance(flag, str) else tuple(flag)
    meta = Setting(
        help=help,
        flags=flags if flags != ("",) else (),
        unit=unit,
        env=env,
        why=why,
        show_default=show_default,
        min=min,
        max=max,
        choices=tuple(choices),
        multiple=multiple,
        required=default is attrs.NOTHING and factory is None,
        convert=convert,
        metavar=metavar,
        kind=kind,
    )
    if factory is not None:
        return attrs.field(factory=factory, validator=validator, metadata={KEY: meta})
    return attrs.field(default=default, validator=validator, metadata={KEY: meta})


def settings_of(cls: type) -> list[tuple[attrs.Attribute[Any], Setting]]:
    """The fields of an attrs class declared with ``setting``, in declaration order,
    with their flags filled in (``--<name>`` by default)."""
    out = []
    for field in attrs.fields(cls):
        meta = field.metadata.get(KEY)
        if meta is None:
            continue
        if not meta.flags:
            meta = attrs.evolve(meta, flags=("--" + field.name.replace("_", "-"),))
        out.append((field, meta))
    return out


def _click_type(field: attrs.Attribute[Any], meta: Setting) -> Any:
    if meta.kind is not None:
        return meta.kind
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if meta.choices:
        return click.Choice(list(meta.choices))
    if kind.startswith("int"):
        return click.IntRange(meta.min, meta.max) if (meta.min, meta.max) != (None, None) else int  # type: ignore[arg-type]
    if kind.startswith("float"):
        return FiniteFloat(meta.min, meta.max)
    return None


class FiniteFloat(click.FloatRange):
    """A float option that is a real number: click's FLOAT takes ``nan`` and ``inf``,
    which no duration or factor can be (``--handshake-period nan`` started a scheduler
    that never handshook)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def __repr__(self) -> str:
        return "FiniteFloat"


def _help(meta: Setting) -> str:
    text = meta.help
    if meta.unit:
        text += f" [unit: {meta.unit}]"
    if meta.why:
        text += f" Why this default: {meta.why}"
    return text


def _default(field: attrs.Attribute[Any]) -> Any:
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory()  # type: ignore[union-attr]
    return default


def _converter(
    field: attrs.Attribute[Any], meta: Setting
) -> Callable[[click.Context, click.Parameter, Any], Any]:
    convert = meta.convert
    assert convert is not None
    flag = meta.flags[0]

    def callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is None:  # not given: the field's own default, not converted
            return _default(field)
        try:
            return convert(value)
        except (ValueError, HamiError) as exc:
            message = str(exc).removeprefix(f"{flag}: ")
            raise click.BadParameter(message, param_hint=flag) from None

    return callback


def click_option(field: attrs.Attribute[Any], meta: Setting) -> Callable[[F], F]:
    """The click option of one setting; its destination is the field's name. A ``bool``
    field (or ``bool | None``: None when neither flag is given) is a ``--x/--no-x``
    pair."""
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    flags = list(meta.flags)
    if kind in ("bool", "bool | None"):
        flags = [f"{flags[0]}/--no-{flags[0][2:]}", *flags[1:]]
    kwargs: dict[str, Any] = {
        "help": _help(meta),
        "multiple": meta.multiple,
        "required": meta.required,
    }
    if meta.convert is not None:
        kwargs["callback"] = _converter(field, meta)
        default = _default(field)
        if isinstance(default, str) and default:
            # given to click, so --help shows it; the callback reads it as a flag's text
            kwargs["default"] = default
            kwargs["show_default"] = meta.show_default or True
        elif meta.show_default:
            kwargs["show_default"] = meta.show_default
    elif not meta.required:
        default = _default(field)
        kwargs["default"] = default
        kwargs["show_default"] = meta.show_default or default not in (None, "", ())
    click_type = _click_type(field, meta)
    if click_type is not None:
        kwargs["type"] = click_type
    if meta.env:
        kwargs["envvar"] = meta.env
        kwargs["show_envvar"] = True
    if meta.metavar:
        kwargs["metavar"] = meta.metavar
    return click.option(*flags, field.name, **kwargs)


def click_options(cls: type) -> Callable[[F], F]:
    """Decorate a click command with one option per setting of ``cls``, in the order
    the class declares them (``--help`` lists them so)."""

    def decorate(fn: F) -> F:
        for field, meta in reversed(settings_of(cls)):
            fn = click_option(field, meta)(fn)
        return fn

    return decorate


def _shown_default(field: attrs.Attribute[Any], meta: Setting) -> str:
    if meta.show_default:
        return meta.show_default
    if meta.required:
        return "required"
    default = _default(field)
    if default in (None, "", (), {}):
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    return f"`{default}`"


def settings_markdown(commands: Sequence[tuple[str, type]]) -> str:
    """The settings reference (``docs/settings.md``): per command, per setting its flag,
    environment variable, unit, default, what it does and why that default.

    Args:
        commands: ``(command line, Options class)`` pairs, e.g. ``("hami scheduler",
            SchedulerOptions)``.
    """
    lines = [
        "# Settings of the hami processes",
        "",
        "Generated from the `*Options` classes of `hami_core/servers/options.py` and",
        "`hami_core/options.py` by `scripts/gen-settings-doc.py` (each setting is stated",
        "once, there; `--help` shows the same text). Ranges are checked at start: a bad",
        "value stops the command with the flag named.",
    ]
    for title, cls in commands:
        lines += ["", f"## `{title}`", ""]
        for field, meta in settings_of(cls):
            flags = ", ".join(f"`{f}`" for f in meta.flags)
            facts = [f"default {_shown_default(field, meta)}"]
            if meta.unit:
                facts.append(meta.unit)
            if meta.min is not None or meta.max is not None:
                lo = "" if meta.min is None else f"{meta.min:g} ≤ "
                hi = "" if meta.max is None else f" ≤ {meta.max:g}"
                facts.append(f"{lo}value{hi}")
            if meta.choices:
                facts.append(" | ".join(meta.choices))
            if meta.env:
                facts.append(f"env `{meta.env}`")
            if meta.multiple:
                facts.append("repeatable")
            lines.append(f"- {flags} ({'; '.join(facts)}): {meta.help}")
            if meta.why:
                lines.append(f"  *Why this default:* {meta.why}")
    return "\n".join(lines) + "\n"


#: Go's ``strconv.ParseBool`` spellings, which Go's ``flag`` and pflag accept in
#: ``--x=<value>`` for a boolean flag.
GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_bool_args(command: click.Command, args: Sequence[str]) -> list[str]:
    """``args`` with each ``--x=<Go bool>`` of a ``--x/--no-x`` flag pair of ``command``
    turned into ``--x`` or ``--no-x``; arguments after ``--`` are left as they are.

    Raises:
        click.BadParameter: the value is not one of Go's (``GO_TRUE``, ``GO_FALSE``),
            naming the flag (exit status 2).
    """
    pairs: dict[str, tuple[str, str]] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.is_flag and param.secondary_opts:
            for opt in param.opts:
                pairs[opt] = (opt, param.secondary_opts[0])
    out: list[str] = []
    for pos, arg in enumerate(args):
        if arg == "--":
            return [*out, *args[pos:]]
        name, eq, value = arg.partition("=")
        if not eq or name not in pairs:
            out.append(arg)
        elif value in GO_TRUE:
            out.append(pairs[name][0])
        elif value in GO_FALSE:
            out.append(pairs[name][1])
        else:
            raise click.BadParameter(
                f"{value!r} is not a boolean (true, false, 1, 0, t, f)", param_hint=name
            )
    return out


class SettingsCommand(click.Command):
    """A command whose boolean settings also take Go's ``--x=false`` (``go_bool_args``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """click's parsing, after ``go_bool_args``."""
        return super().parse_args(ctx, go_bool_args(self, args))
