"""Policy specs: ``name[:key=value,key=value]`` → a registered prefetcher (or, with
``role="eviction"``, eviction policy) and its options.

Every command that names a prefetcher (simulate, eval, sweep, run, the pager's
``--policy``, pager table, bench) parses it here, so the grammar, the checks and the error
messages are the same everywhere. The valid names come from the policy registry
(``policies/base.py``) and the valid keys, their types and defaults from each
constructor's signature (a C-only policy's ``options`` function), so a new prefetcher
needs nothing here.

What a policy declares at registration shapes its specs: a ``Shorthand`` (``stride:8`` is
``stride:degree=8``, ``nextline:8`` is ``window=9``: N pages per batch; ``table:FILE``),
deprecated ``Alias``es (``next:N``, nextline with ``before=0``; the spec carries the
one-line warning) and per-backend defaults (``parse_policy_spec(text, backend="pager")``:
``stride`` maps 16 pages per fault in the pager, 4 elsewhere). With a backend, names the
backend does not run are refused in one line naming the backends that do.

A comma inside a spec separates options; in a comma-separated *list* of specs an item
that is not ``key=value`` starts the next spec (``stride:degree=8,min_conf=2,nextline`` is two
specs). That is unambiguous as long as no option value itself contains a comma; repeat
the flag (``--policy a --policy b``) when one does.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from pagecast.errors import PagecastError

_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
_SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class PolicyParam:
    """One option a prefetcher's constructor takes, as a spec may set it."""

    name: str
    type: type  # bool, int, float or str
    default: Any
    optional: bool = False  # ``none`` sets it to None

    def convert(self, text: str) -> Any:
        """The value of ``key=text``; ValueError with the reason when it does not fit the type."""
        if self.optional and text.lower() == "none":
            return None
        if self.type is bool:
            try:
                return _BOOLS[text.lower()]
            except KeyError:
                raise ValueError("not a boolean (true/false)") from None
        if self.type is int:
            try:
                return int(text, 0) if text.lower().startswith(("0x", "0o", "0b")) else int(text)
            except ValueError:
                raise ValueError("not an integer") from None
        if self.type is float:
            try:
                return float(text)
            except ValueError:
                raise ValueError("not a number") from None
        return text


@dataclass(frozen=True)
class PolicySpec:
    """A parsed spec: the registered name and the options given (defaults not filled in)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    role: str = "prefetcher"  # or "eviction"
    backend: str | None = field(default=None, compare=False)  # whose defaults filled ``options``
    warning: str = field(default="", compare=False)  # a deprecated alias was used: say so, one line
    text: str = field(default="", compare=False)  # as the user wrote it, for messages

    def __str__(self) -> str:
        return format_policy_spec(self.name, self.options)

    def _fail(self, e: Exception) -> PagecastError:
        what = "eviction" if self.role == "eviction" else "policy"
        return PagecastError(f"{what} {self.text or str(self)!r}: {e}")

    def build(self):
        """The prefetcher (or eviction policy) this spec describes."""
        from pagecast.policies.base import get_eviction, get_prefetcher

        try:
            return (get_eviction if self.role == "eviction" else get_prefetcher)(self.name, **self.options)
        except (TypeError, ValueError) as e:
            raise self._fail(e) from None

    def native_config(self) -> dict[str, Any]:
        """The settings a native backend runs this policy with (the pager's ``depth``,
        ``before``, ``min_conf``, ``table``): the policy's own ``native_config``, checked
        by its constructor (or a C-only policy's ``options`` function)."""
        from pagecast.policies.base import policy_entry

        entry = policy_entry(self.name)
        if entry is not None and entry.factory is None:
            try:
                return dict(entry.options(**self.options)) if entry.options else {}
            except (TypeError, ValueError) as e:
                raise self._fail(e) from None
        built = self.build()
        return dict(built.native_config()) if hasattr(built, "native_config") else {}


ROLES = ("prefetcher", "eviction")


def _registry(role: str = "prefetcher") -> dict[str, Callable[..., Any]]:
    # The registry's own table: spec parsing needs the factories' signatures, which
    # get_prefetcher does not expose.
    from pagecast.policies import base

    base._load_all()
    if role not in ROLES:
        raise ValueError(f"unknown policy role {role!r}")
    return base._EV_REGISTRY if role == "eviction" else base._REGISTRY


def policy_names(role: str = "prefetcher") -> list[str]:
    return sorted(_registry(role))


def _scalar_type(hint: Any, default: Any) -> tuple[type | None, bool]:
    """(scalar type, whether None is allowed) of an annotation; (None, _) if not a scalar."""
    optional = False
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else None
    if hint in _SCALARS:
        return hint, optional
    if hint is None or hint is inspect.Parameter.empty:
        if default is None:
            return str, True
        if isinstance(default, _SCALARS):
            return type(default), optional
    return None, optional


def policy_params(name: str, role: str = "prefetcher", backend: str | None = None) -> dict[str, PolicyParam]:
    """The options a spec may set for the registered prefetcher ``name``, in signature order
    (defaults as ``backend`` runs it, when given).

    Parameters whose type is not a scalar (the oracle's in-memory stream) are left out:
    only code can pass them.
    """
    factory = _factory(name, role, backend)
    defaults = _entry(name).defaults_for(backend) if backend else {}
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # an annotation that does not resolve here: fall back to the defaults
        hints = {}
    out: dict[str, PolicyParam] = {}
    for p in inspect.signature(factory).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        typ, optional = _scalar_type(hints.get(p.name, inspect.Parameter.empty), default)
        if typ is not None:
            out[p.name] = PolicyParam(p.name, typ, defaults.get(p.name, default), optional or default is None)
    return out


def _entry(name: str):
    from pagecast.policies.base import policy_entry

    return policy_entry(name)


def _factory(name: str, role: str = "prefetcher", backend: str | None = None) -> Callable[..., Any]:
    if backend is not None and role == "prefetcher":
        _check_backend(name, backend)
        entry = _entry(name)
        return entry.factory or entry.options or (lambda: {})
    reg = _registry(role)
    if name not in reg:
        what = "eviction policy" if role == "eviction" else "prefetcher"
        raise PagecastError(f"unknown {what} {name!r} (valid: {', '.join(sorted(reg))})")
    return reg[name]


def parse_eviction_spec(text: str) -> PolicySpec:
    """``--eviction NAME[:key=value,...]``: the same grammar, over the eviction registry."""
    return parse_policy_spec(text, role="eviction")


def _check_backend(name: str, backend: str) -> None:
    """A one-line PagecastError unless ``backend`` runs the registered policy ``name``."""
    from pagecast.policies.base import supports, unsupported

    if supports(name, backend):
        return
    if _entry(name) is None:
        raise PagecastError(f"unknown {backend} policy {name!r} (valid: {policy_syntax(backend)})")
    raise PagecastError(unsupported(name, backend))


def policy_syntax(backend: str) -> str:
    """The names ``backend`` runs with their shorthands, and the deprecated aliases:
    ``nextline[:N], none, ...; deprecated: next[:N]``."""
    from pagecast.policies.base import aliases, policies_for

    def form(name: str, shown: str = "") -> str:
        sh = _entry(name).shorthand
        return (shown or name) + (sh.syntax if sh else "")

    runs = policies_for(backend)
    old = [form(a.target, a.name) for a in aliases() if a.target in runs]
    return ", ".join(form(n) for n in runs) + (f"; deprecated: {', '.join(old)}" if old else "")


def parse_policy_spec(
    text: str, role: str = "prefetcher", backend: str | None = None, defaults: dict[str, Any] | None = None
) -> PolicySpec:
    """``name``, ``name:key=value,key=value`` or ``name:VALUE[,key=value...]`` (the policy's
    declared shorthand) → PolicySpec, checked against the registry.

    With ``backend`` (``"pager"``...), the names are those it runs and the options start
    from its defaults; ``defaults`` (the caller's) come next, then the text's. Unknown names, unknown keys and values of the wrong type are
    one-line PagecastErrors that list what is valid.
    """
    if isinstance(text, PolicySpec):
        return text
    name, _, rest = str(text).strip().partition(":")
    name = name.strip()
    if not name:
        raise PagecastError(f"empty policy name in {text!r} (use NAME[:key=value,...])")
    implied: dict[str, Any] = {}
    warning = ""
    shorthand = None
    if role == "eviction":
        name = name.lower()
        name = {"belady": "min"}.get(name, name)
    else:
        from pagecast.policies.base import alias

        old = alias(name)
        if old is not None:
            name, implied, warning = old.target, dict(old.implies), old.warning
        entry = _entry(name)
        shorthand = entry.shorthand if entry is not None else None
    params = policy_params(name, role, backend)
    bare, items = _split_rest(rest, params, shorthand)
    opts: dict[str, Any] = {}
    if bare is not None:
        opts[shorthand.key] = _bare_value(text, name, bare, shorthand, params)
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            keys = ", ".join(params) or "none"
            raise PagecastError(
                f"policy {text!r}: {item.strip()!r} is not key=value (use {name}:key=value,...; keys: {keys})"
            )
        if key in opts:
            raise PagecastError(f"policy {text!r}: {key} is given twice")
        param = params.get(key)
        if param is None:
            valid = ", ".join(params) or "none"
            raise PagecastError(f"policy {text!r}: {name} has no option {key!r} (valid: {valid})")
        try:
            opts[key] = param.convert(value.strip())
        except ValueError as e:
            raise PagecastError(f"policy {text!r}: {key}={value.strip()!r} is {e} ({_describe(param)})") from None
    first = _entry(name).defaults_for(backend) if backend and role == "prefetcher" else {}
    given = {k: v for k, v in (defaults or {}).items() if k in params}
    return PolicySpec(name, {**first, **implied, **given, **opts}, role, backend, warning, str(text).strip())


def _split_rest(rest: str, params: dict[str, PolicyParam], shorthand: Any) -> tuple[str | None, list[str]]:
    """(the bare shorthand value or None, the ``key=value`` items)."""
    if not rest.strip():
        return None, []
    if shorthand is not None and shorthand.key in params and params[shorthand.key].type is str:
        if rest.partition("=")[0].strip() not in params:  # a file name, ',' and '=' included
            return rest.strip(), []
    items = rest.split(",")
    if shorthand is not None and shorthand.key in params and "=" not in items[0]:
        return items[0].strip(), items[1:]
    return None, items


def _bare_value(text: str, name: str, value: str, shorthand: Any, params: dict[str, PolicyParam]) -> Any:
    param = params[shorthand.key]
    try:
        v = param.convert(value)
    except ValueError as e:
        raise PagecastError(
            f"policy {text!r}: {value!r} is not key=value, and as {name}:{shorthand.metavar} "
            f"(the {shorthand.key}) it is {e} (valid keys: {', '.join(params)})"
        ) from None
    return v + shorthand.offset if shorthand.offset and isinstance(v, int) else v


def format_policy_spec(name: str, options: dict[str, Any] | None = None) -> str:
    """The spec text that parses back to (name, options)."""
    if not options:
        return name
    return name + ":" + ",".join(f"{k}={_render(v)}" for k, v in options.items())


def _render(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _describe(p: PolicyParam) -> str:
    return f"{p.name}: {p.type.__name__}{' or none' if p.optional else ''}, default {_render(p.default)}"


def split_policy_list(texts: str | Iterable[str]) -> list[str]:
    """Specs from comma-separated lists: a piece that is not ``key=value`` starts a new spec.

    ``"none,stride:degree=8,min_conf=2,nextline"`` → ``["none", "stride:degree=8,min_conf=2",
    "nextline"]``. Several texts (a repeated flag) are split each and concatenated.
    """
    if isinstance(texts, str):
        texts = [texts]
    out: list[str] = []
    for text in texts:
        cur: str | None = None
        for piece in text.split(","):
            if cur is not None and _is_option(piece):
                cur += "," + piece
                continue
            if cur is not None:
                out.append(cur.strip())
            cur = piece
        if cur is not None and cur.strip():
            out.append(cur.strip())
    return [s for s in out if s]


def _is_option(piece: str) -> bool:
    """``key=value`` (continues the spec before it), not ``name`` or ``name:key=value``."""
    key, eq, _ = piece.partition("=")
    return bool(eq) and ":" not in key


def policy_defaults_help(names: Iterable[str] | None = None, role: str = "prefetcher") -> str:
    """One line per policy with its options and defaults, for ``--help``."""
    lines = []
    for n in names if names is not None else policy_names(role):
        params = policy_params(n, role)
        opts = ", ".join(f"{p.name}={_render(p.default)}" for p in params.values())
        lines.append(f"{n}: {opts}" if opts else n)
    return "; ".join(lines)
