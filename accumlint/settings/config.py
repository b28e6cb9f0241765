"""``[tool.accumlint]`` in ``pyproject.toml`` and ruff-style rule selection.

Keys: ``select``, ``ignore``, ``extend-select``, ``exclude``, ``extend-exclude``,
``per-file-ignores``, ``cache-dir``, ``parse-timeout``, ``respect-gitignore``, ``noqa-style``,
``extend``. The configuration is the first ``pyproject.toml`` with a ``[tool.accumlint]`` table
found walking up from the checked path (or the file given with ``--config``); its directory is
the project root that exclude and per-file-ignores globs are relative to.

``extend = "../pyproject.toml"`` (ruff's ``extend``) inherits another configuration file (a
``pyproject.toml``'s ``[tool.accumlint]`` table, or the top-level keys of another TOML file without one, such
as an ``.accumlint.toml``), its path relative to the file that names it. The base is read first:
its rule selection applies before the file's own (an ``ignore`` adds to the base's), its
``extend-exclude`` globs add to the file's, and every other key the file sets replaces the
base's. The base's globs and ``cache-dir`` stay relative to the base's folder.

Selectors are full codes (``ACC001``), prefixes (``ACC1``, ``ACC00``) or ``ALL``. The
default selection is every rule with ``default_enabled = True`` plus ``ACC000``; any
explicit selector (``ALL``, ``ACC9``) also enables rules that are off by default. As in
ruff, when a code is matched by both a select and an ignore selector, the more specific
selector wins and ``ignore`` wins a tie. ``ACC000`` (a file could not be checked) stays
on unless it is ignored by its full code. ``ACC990`` (unused ``noqa``) is off by default and
is selected by ``ALL``, ``ACC99`` or its full code (not by ``ACC9``, the info facts).
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from accumlint.files.reading import FileTooLarge, NotARegularFile, read_bounded_text, why_unread
from accumlint.noqa.noqa_report import UNUSED_NOQA_CODE
from accumlint.noqa.suppression import FORMS, NOQA_FORM
from accumlint.spec import registry
from accumlint.spec.registry import PARSE_ERROR_CODE

ALL_SELECTOR = "ALL"
CONFIG_FILE = "pyproject.toml"
KNOWN_KEYS = (
    "select",
    "ignore",
    "extend-select",
    "exclude",
    "extend-exclude",
    "per-file-ignores",
    "cache-dir",
    "parse-timeout",
    "respect-gitignore",
    "noqa-style",
    "extend",
)
#: the keys that select rules: a base's layer is applied before the extending file's
SELECTION_KEYS = ("select", "ignore", "extend-select")
#: the keys whose values a base and the file extending it both contribute
ADDITIVE_KEYS = (*SELECTION_KEYS, "extend-exclude")
#: seconds a file's check may run in a worker before it gets ACC000 and the worker is replaced
DEFAULT_PARSE_TIMEOUT = 10.0


class ConfigError(Exception):
    """A configuration problem; the message is one line naming the key or value at fault."""


@dataclass(frozen=True)
class SelectionLayer:
    """One layer of rule selection (the config file, then the command line).

    ``select`` is ``None`` when the layer does not set it: the previous layer's selection
    carries over and ``extend_select``/``ignore`` adjust it.
    """

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()


@dataclass
class Settings:
    """The ``[tool.accumlint]`` settings in effect (defaults where no config file was found)."""

    project_root: Path
    config_path: Path | None = None
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    #: ``cache-dir``, resolved against the project root (None: the default location)
    cache_dir: Path | None = None
    #: ``parse-timeout``: seconds a file's check may take in a worker (0: no limit)
    parse_timeout: float = DEFAULT_PARSE_TIMEOUT
    #: ``respect-gitignore``: directory walks skip what git ignores (:mod:`accumlint.settings.gitignore`)
    respect_gitignore: bool = True
    #: ``noqa-style``: the form of directive that ``--add-noqa`` and the editor's quick fix write,
    #: ``noqa`` or ``accumlint`` (accumlint's own, which ruff's RUF100 never deletes)
    noqa_style: str = NOQA_FORM
    #: the rule-selection layers of the files this one extends, the furthest base first
    base_layers: tuple[SelectionLayer, ...] = ()
    #: the files ``extend`` chains to, nearest first (empty: the file extends nothing)
    extends: tuple[Path, ...] = ()
    #: each ``[tool.accumlint]`` key a configuration file set -> the files whose values it holds
    #: (several for the keys that add up across ``extend``: the selection, ``extend-exclude``)
    sources: dict[str, tuple[Path, ...]] = field(default_factory=dict)

    def layer(self) -> SelectionLayer:
        """The config file's own rule-selection layer (what it sets itself, without its bases)."""
        return SelectionLayer(
            select=None if self.select is None else tuple(self.select),
            ignore=tuple(self.ignore),
            extend_select=tuple(self.extend_select),
        )

    def layers(self) -> tuple[SelectionLayer, ...]:
        """The rule-selection layers in the order they apply: the bases' (furthest first), then this file's."""
        return (*self.base_layers, self.layer())


# --- codes and selectors ----------------------------------------------------------


def known_codes() -> list[str]:
    """Every code that can be selected: ``ACC000``, ``ACC990`` (unused noqa) and the registered rules, sorted."""
    return sorted({PARSE_ERROR_CODE, UNUSED_NOQA_CODE, *(rule.code for rule in registry.RULES)})


def default_codes() -> frozenset[str]:
    """The codes enabled when nothing is selected: default-enabled rules plus ``ACC000``."""
    return frozenset({PARSE_ERROR_CODE, *(r.code for r in registry.RULES if r.default_enabled)})


def _allowed_selectors_hint(codes: Sequence[str], selector: str = "") -> str:
    """What a selector may be: ALL, a code (the ones closest to ``selector`` named; every code
    would be a line of its own as the catalogue grows) or a prefix of one."""
    prefixes = sorted({code[:4] for code in codes})
    close = difflib.get_close_matches(selector.strip().upper(), codes, n=3, cutoff=0.6) if selector else []
    near = f"; did you mean {' or '.join(close)}?" if close else ""
    return (f"allowed: ALL, a code (`accumlint rule --all` lists the {len(codes)}) or a prefix of one "
            f"(e.g. {', '.join(prefixes)}){near}")


def validate_selector(value: object, key: str) -> str:
    """Return ``value`` as a normalized selector, or raise :class:`ConfigError` naming ``key``."""
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a rule code string, got {_shown(value)}")
    selector = value.strip().upper()
    codes = known_codes()
    if selector == ALL_SELECTOR or (
        selector.startswith("ACC") and any(code.startswith(selector) for code in codes)
    ):
        return selector
    raise ConfigError(f"{key}: unknown rule selector {_shown(value)}; {_allowed_selectors_hint(codes, selector)}")


def validate_selectors(values: Iterable[object], key: str) -> list[str]:
    """Validate a list of selectors (see :func:`validate_selector`)."""
    return [validate_selector(v, key) for v in values]


def _matches(selector: str, code: str) -> bool:
    if code == PARSE_ERROR_CODE:  # only its full code names ACC000
        return selector == PARSE_ERROR_CODE
    if code == UNUSED_NOQA_CODE:  # a check of the directives, not a fact: ALL, ACC99 or ACC990, not ACC9
        return selector == ALL_SELECTOR or (len(selector) > len("ACC9") and code.startswith(selector))
    return selector == ALL_SELECTOR or code.startswith(selector)


def _specificity(selector: str) -> int:
    return 0 if selector == ALL_SELECTOR else len(selector)


def resolve_selection(layers: Sequence[SelectionLayer], codes: Iterable[str] | None = None) -> frozenset[str]:
    """The enabled codes after applying ``layers`` in order to the default selection.

    Within a layer, selectors are applied from least to most specific; at each
    specificity the select selectors are applied first and the ignore selectors after,
    so a more specific selector wins and ``ignore`` wins a tie (ruff's semantics).
    """
    universe = sorted(known_codes() if codes is None else set(codes))
    enabled = set(default_codes() & set(universe))
    parse_error_ignored = False
    for layer in layers:
        if layer.select is not None:
            enabled = set()
            selects = [*layer.select, *layer.extend_select]
        else:
            selects = list(layer.extend_select)
        ignores = list(layer.ignore)
        if PARSE_ERROR_CODE in ignores:
            parse_error_ignored = True
        elif PARSE_ERROR_CODE in selects:
            parse_error_ignored = False
        for spec in sorted({_specificity(s) for s in [*selects, *ignores]}):
            for selector in selects:
                if _specificity(selector) == spec:
                    enabled.update(code for code in universe if _matches(selector, code))
            for selector in ignores:
                if _specificity(selector) == spec:
                    enabled.difference_update(code for code in universe if _matches(selector, code))
    if not parse_error_ignored:
        enabled.add(PARSE_ERROR_CODE)
    return frozenset(enabled)


def ignored_codes(selectors: Iterable[str], enabled: Iterable[str]) -> frozenset[str]:
    """The codes among ``enabled`` that ``selectors`` (an ignore list) match."""
    selectors = list(selectors)
    return frozenset(code for code in enabled if any(_matches(s, code) for s in selectors))


# --- paths and globs --------------------------------------------------------------


def _posix_relative(path: Path, root: Path) -> str | None:
    try:
        return PurePath(os.path.relpath(path, root)).as_posix() if path.is_relative_to(root) else None
    except ValueError:  # different drives on Windows
        return None


def glob_matches(path: str | os.PathLike[str], pattern: str, root: Path, *, ancestors: bool = True) -> bool:
    """Whether ``pattern`` matches ``path`` the way ruff's exclude globs do.

    The pattern is tried against the path's basename, its path relative to ``root`` and
    its absolute path; with ``ancestors`` a pattern that matches a directory above the
    path (below ``root``) matches too. ``*`` matches across ``/``.
    """
    pattern = pattern.strip()
    if pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.rstrip("/") or pattern
    absolute = Path(os.path.abspath(path))
    relative = _posix_relative(absolute, root)
    candidates = [absolute.as_posix(), absolute.name]
    if relative is not None and relative != ".":
        parts = PurePath(relative).parts
        stop = 0 if ancestors else len(parts) - 1
        for end in range(len(parts), stop, -1):  # the path, then its ancestors below the root
            candidates.append("/".join(parts[:end]))
            candidates.append(parts[end - 1])
    if ancestors and os.path.isabs(pattern):  # an extended base's folder glob, made absolute
        candidates.extend(parent.as_posix() for parent in absolute.parents)
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


# --- loading ----------------------------------------------------------------------


def _string_list(table: Mapping[str, Any], key: str) -> list[str] | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.accumlint] {key}: expected a list of strings, got {_shown(value)}")
    return list(value)


def settings_from_table(table: Mapping[str, Any], project_root: Path, config_path: Path | None) -> Settings:
    """Validate a ``[tool.accumlint]`` table and turn it into :class:`Settings`."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"[tool.accumlint] must be a table, got {_shown(table)}")
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(
            f"[tool.accumlint] unknown key {_shown(unknown[0])}; "
            f"allowed keys: {', '.join(KNOWN_KEYS)}"
        )
    settings = Settings(project_root=project_root, config_path=config_path)
    if config_path is not None:
        settings.sources = {key: (config_path,) for key in table}
    if "extend" in table:
        _extend_target(table["extend"], project_root)  # validated here; followed by load_settings
    select = _string_list(table, "select")
    if select is not None:
        settings.select = validate_selectors(select, "[tool.accumlint] select")
    for key, attr in (("ignore", "ignore"), ("extend-select", "extend_select")):
        values = _string_list(table, key)
        if values is not None:
            setattr(settings, attr, validate_selectors(values, f"[tool.accumlint] {key}"))
    for key, attr in (("exclude", "exclude"), ("extend-exclude", "extend_exclude")):
        values = _string_list(table, key)
        if values is not None:
            setattr(settings, attr, values)
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, Mapping):
            raise ConfigError(
                f"[tool.accumlint] per-file-ignores: expected a table of glob = [codes], got {_shown(pfi)}"
            )
        for pattern, codes in pfi.items():
            key = f"[tool.accumlint] per-file-ignores {_shown(pattern)}"
            if not isinstance(codes, list):
                raise ConfigError(f"{key}: expected a list of rule codes, got {_shown(codes)}")
            settings.per_file_ignores[pattern] = validate_selectors(codes, key)
    if "cache-dir" in table:
        value = table["cache-dir"]
        if not isinstance(value, str) or not value.strip() or "\0" in value:  # no path holds a NUL
            raise ConfigError(f"[tool.accumlint] cache-dir: expected a directory path, got {_shown(value)}")
        settings.cache_dir = project_root / Path(value).expanduser()
    if "parse-timeout" in table:
        settings.parse_timeout = validate_timeout(table["parse-timeout"], "[tool.accumlint] parse-timeout")
    if "respect-gitignore" in table:
        value = table["respect-gitignore"]
        if not isinstance(value, bool):
            raise ConfigError(f"[tool.accumlint] respect-gitignore: expected true or false, got {_shown(value)}")
        settings.respect_gitignore = value
    if "noqa-style" in table:
        value = table["noqa-style"]
        if value not in FORMS:
            expected = " or ".join(f'"{form}"' for form in FORMS)
            raise ConfigError(f"[tool.accumlint] noqa-style: expected {expected}, got {_shown(value)}")
        settings.noqa_style = value
    return settings


def validate_timeout(value: object, key: str) -> float:
    """``value`` as a number of seconds (0: no limit), or raise :class:`ConfigError` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86400:
        raise ConfigError(f"{key}: expected seconds between 0 (no limit) and 86400, got {_shown(value)}")
    return float(value)


#: how much of a rejected value a configuration error quotes
SHOWN_CHARACTERS = 80


def _shown(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN_CHARACTERS`: an error stays one short line whatever the
    value (a 4,000-digit integer, whose full ``repr`` would also be slow, a megabyte string)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOWN_CHARACTERS:
        try:
            return f"an integer of {len(str(abs(value)))} digits"
        except ValueError:  # more digits than the interpreter converts (4,300): tomllib never gives one
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else f"{text[:SHOWN_CHARACTERS]}..."


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML document in ``path``, read whole by the bounded reader (a regular file of at most
    :data:`~accumlint.files.reading.MAX_CONFIG_BYTES`); raises :class:`ConfigError` for anything else."""
    try:
        return tomllib.loads(read_bounded_text(path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file does not exist") from None
    except (NotARegularFile, FileTooLarge) as exc:  # a link to /dev/zero or a FIFO must not hang the run
        raise ConfigError(f"{path}: config file not read: {why_unread(exc)}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML (not UTF-8: byte {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML (arrays or tables nested too deep)") from None
    except ValueError as exc:  # a value tomllib cannot convert: an integer of more than 4,300 digits
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None


def _accumlint_table(data: Mapping[str, Any]) -> Any:
    tool = data.get("tool")
    if isinstance(tool, Mapping) and "accumlint" in tool:
        return tool["accumlint"]
    return None


def _config_table(path: Path, *, required: bool) -> Mapping[str, Any]:
    """The settings table of the configuration file ``path``: its ``[tool.accumlint]``; in a file
    not named ``pyproject.toml`` that has none, its top level (an ``.accumlint.toml``). A
    ``pyproject.toml`` without the table gives no settings, unless ``required`` (an extended file)."""
    data = _read_toml(path)
    table = _accumlint_table(data)
    if table is None and path.name != CONFIG_FILE:
        return data
    if table is not None and not isinstance(table, Mapping):  # `[[tool.accumlint]]`, `accumlint = 5` under [tool]
        raise ConfigError(f"{path}: [tool.accumlint] must be a table, got {_shown(table)}")
    if table is None and required:
        raise ConfigError(f"{path}: no [tool.accumlint] table to extend")
    return {} if table is None else table


def _extend_target(value: object, folder: Path) -> Path:
    """The file an ``extend`` value names: ``~`` and ``$VARS`` expanded, relative to ``folder``
    (the folder of the file that holds the key). Raises :class:`ConfigError` for a non-path."""
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ConfigError(f"[tool.accumlint] extend: expected the path of a configuration file, got {_shown(value)}")
    return Path(os.path.abspath(folder / os.path.expanduser(os.path.expandvars(value))))


def _anchored(pattern: str, root: Path) -> str:
    """A base file's glob as the extending file must match it: one with a folder part
    (``gen/*.py``) made absolute under the base's ``root``; a bare name (``*_pb2.py``) matches
    a file's name anywhere, so it stays as it is."""
    bare = pattern.strip().removeprefix("./")
    if "/" not in bare.rstrip("/") or os.path.isabs(bare):
        return pattern
    return (root / bare).as_posix()


def _inherit(base: Settings, own: Settings, keys: Iterable[str]) -> Settings:
    """``own`` (from a table with ``keys``) on top of ``base``: the keys it does not set are the
    base's, its selection applies after the base's, and the ``extend-exclude`` globs add up."""
    keys = set(keys)
    root = base.project_root
    if "exclude" not in keys:
        own.exclude = [_anchored(glob, root) for glob in base.exclude]
    own.extend_exclude = [*(_anchored(glob, root) for glob in base.extend_exclude), *own.extend_exclude]
    if "per-file-ignores" not in keys:
        own.per_file_ignores = {_anchored(glob, root): codes for glob, codes in base.per_file_ignores.items()}
    for key, attr in (("cache-dir", "cache_dir"), ("parse-timeout", "parse_timeout"),
                      ("respect-gitignore", "respect_gitignore"), ("noqa-style", "noqa_style")):
        if key not in keys:
            setattr(own, attr, getattr(base, attr))
    own.base_layers = base.layers()
    for key, files in base.sources.items():
        if key in SELECTION_KEYS and "select" in keys:  # the file's own `select` starts afresh
            continue
        if key in ADDITIVE_KEYS:
            own.sources[key] = (*files, *own.sources.get(key, ()))
        elif key not in keys:
            own.sources[key] = files
    return own


def _load_chain(path: Path, overrides: Mapping[str, Any], chain: tuple[Path, ...], *, required: bool) -> Settings:
    """The settings of the configuration file ``path`` with the files it ``extend``s; ``chain``:
    the files that led here (extending each other), to refuse a cycle."""
    table = {**_config_table(path, required=required), **overrides}
    try:
        own = settings_from_table(table, path.parent, path)
    except ConfigError as exc:  # the message names the file at fault: a run may read several
        raise ConfigError(f"{path}: {exc}") from None
    if "extend" not in table:
        return own
    target = _extend_target(table["extend"], path.parent)
    seen = [os.path.realpath(p) for p in (*chain, path)]  # a link to a file on the chain is that file
    if os.path.realpath(target) in seen:
        cycle = " -> ".join(str(p) for p in (*chain, path, target)[seen.index(os.path.realpath(target)):])
        raise ConfigError(f"{path}: [tool.accumlint] extend: the files extend each other in a cycle: {cycle}")
    if not os.path.lexists(target):
        raise ConfigError(f"{path}: [tool.accumlint] extend: {target} does not exist")
    base = _load_chain(target, {}, (*chain, path), required=True)
    own.extends = (target, *base.extends)
    return _inherit(base, own, table)


def load_settings(config_path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> Settings:
    """Load the settings of an explicit config file (defaults if it has no ``[tool.accumlint]``),
    with ``overrides`` (``--config KEY=VALUE``) replacing its keys and the files its ``extend``
    names inherited (see the module's docstring). Raises :class:`ConfigError`, its one line naming
    the file, where a file cannot be read or holds an invalid table, key or value, where ``extend``
    names a missing file or the files extend each other in a cycle."""
    path = Path(config_path).absolute()
    if path.is_dir():
        path = path / CONFIG_FILE
    return _load_chain(path, overrides or {}, (), required=False)


def parse_override(text: str) -> dict[str, Any]:
    """One ``--config KEY=VALUE`` override, VALUE in TOML (``select=["ACC0"]``, ``cache-dir=".c"``).

    Raises :class:`ConfigError` when it is not one valid ``[tool.accumlint]`` key and value.
    """
    try:
        table = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as exc:  # ValueError: an integer too long
        raise ConfigError(f"--config {_shown(text)}: neither a config file nor a TOML `key = value` ({exc})") from None
    if len(table) != 1:
        raise ConfigError(f"--config {_shown(text)}: give one `key = value` per --config")
    settings_from_table(table, Path.cwd(), None)  # validates the key and the value
    return table


def may_be_config(path: str | os.PathLike[str]) -> bool:
    """Whether something that is not a folder is at ``path`` (following links): a ``pyproject.toml``
    to read. A FIFO or a device counts, so that reading it says why it is not used (silently
    passing it over would drop the user's settings)."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def find_config(start: str | os.PathLike[str]) -> Path | None:
    """The first ``pyproject.toml`` with a ``[tool.accumlint]`` table, walking up from ``start``.

    Stops at the filesystem root. A ``pyproject.toml`` that cannot be parsed on the way
    raises :class:`ConfigError` (silently skipping it would hide the user's settings).
    """
    here = Path(os.path.abspath(start))
    if not here.is_dir():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_FILE
        if may_be_config(candidate) and _accumlint_table(_read_toml(candidate)) is not None:
            return candidate
    return None


def common_start(paths: Sequence[str | os.PathLike[str]]) -> Path:
    """The directory to start the config search from: the deepest common ancestor of ``paths``."""
    if not paths:
        return Path.cwd()
    absolute = [os.path.abspath(p) for p in paths]
    try:
        return Path(os.path.commonpath(absolute))
    except ValueError:  # different drives
        return Path(absolute[0])


def discover_settings(
    paths: Sequence[str | os.PathLike[str]], config: str | os.PathLike[str] | None = None
) -> Settings:
    """Settings for checking ``paths``: from ``config`` if given, else found by walking up.

    Without any config file the project root is the current directory.
    """
    if config is not None:
        return load_settings(config)
    found = find_config(common_start(paths))
    if found is None:
        return Settings(project_root=Path.cwd())
    return load_settings(found)


def per_file_ignored(path: str | os.PathLike[str], settings: Settings) -> list[str]:
    """The ignore selectors that ``per-file-ignores`` applies to ``path``."""
    selectors: list[str] = []
    for pattern, codes in settings.per_file_ignores.items():
        if glob_matches(path, pattern, settings.project_root):
            selectors.extend(codes)
    return selectors
