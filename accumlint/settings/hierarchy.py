"""Which settings judge each file: the nearest ``[tool.accumlint]`` above it (ruff's rule).

A file is checked with the first ``pyproject.toml`` holding a ``[tool.accumlint]`` table found
walking up from its folder, whatever else is on the command line, so a file's findings never
depend on which other files are checked with it (pre-commit passes staged files in batches).
``--config FILE`` makes one file judge them all; ``--isolated`` ignores every configuration
file; ``--config KEY=VALUE`` overrides one key on top of whichever file applies.

A ``pyproject.toml`` that cannot be read or parsed judges the files below it too (whether it
holds a ``[tool.accumlint]`` table cannot be known): their settings are its error
(:meth:`Resolver.partition`), and the run reports it for them and checks the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from accumlint.settings import config
from accumlint.settings.config import ConfigError, SelectionLayer, Settings

_UNKNOWN = object()


class Resolver:
    """Settings per file, and the rule codes each settings' file enables on top of the command line.

    ``config_path``: one file for every path; ``isolated``: defaults only; ``overrides``: the
    ``--config KEY=VALUE`` keys; ``cli_layer``: the command line's rule selection. Raises
    :class:`~accumlint.settings.config.ConfigError` (from :meth:`settings_for`) for a broken file.
    """

    def __init__(
        self,
        *,
        config_path: str | os.PathLike[str] | None = None,
        isolated: bool = False,
        overrides: Mapping[str, Any] | None = None,
        cli_layer: SelectionLayer | None = None,
    ) -> None:
        self.config_path = config_path
        self.isolated = isolated
        self.overrides = dict(overrides or {})
        self.cli_layer = cli_layer or SelectionLayer()
        self._by_folder: dict[str, Path | None] = {}
        #: a configuration file's settings, or the error that stands for them (read once)
        self._by_file: dict[Path | None, Settings | ConfigError] = {}
        #: absolute path -> its settings: a run asks for each file more than once (excludes, groups)
        self._by_path: dict[str, Settings] = {}

    def _nearest(self, folder: str) -> Path | None:
        # strings, not Paths: building a Path per file was most of a warm run's settings lookups
        found = self._by_folder.get(folder, _UNKNOWN)
        if found is _UNKNOWN:
            candidate = os.path.join(folder, config.CONFIG_FILE)
            if config.may_be_config(candidate) and self._judges(Path(candidate)):
                found = Path(candidate)
            else:
                parent = os.path.dirname(folder)
                found = None if parent == folder else self._nearest(parent)
            self._by_folder[folder] = found
        return found  # type: ignore[return-value]

    def _judges(self, candidate: Path) -> bool:
        """Whether the ``pyproject.toml`` ``candidate`` judges the files below it: it has a
        ``[tool.accumlint]`` table, or it cannot be parsed (then its error stands for its settings)."""
        try:
            return config._accumlint_table(config._read_toml(candidate)) is not None
        except ConfigError as exc:
            self._by_file[candidate] = exc
            return True

    def _load(self, source: Path | None) -> Settings:
        if source not in self._by_file:
            try:
                if source is None:
                    self._by_file[source] = config.settings_from_table(self.overrides, Path.cwd(), None)
                else:
                    self._by_file[source] = config.load_settings(source, self.overrides)
            except ConfigError as exc:
                self._by_file[source] = exc
        loaded = self._by_file[source]
        if isinstance(loaded, ConfigError):
            raise loaded
        return loaded

    def settings_for(self, path: str | os.PathLike[str]) -> Settings:
        """The settings that judge ``path`` (a file, or a folder: its own nearest configuration)."""
        if self.isolated:
            return self._load(None)
        if self.config_path is not None:
            return self._load(Path(os.path.abspath(self.config_path)))
        absolute = os.path.abspath(path)
        settings = self._by_path.get(absolute)
        if settings is None:
            folder = absolute if os.path.isdir(absolute) else os.path.dirname(absolute)
            settings = self._by_path[absolute] = self._load(self._nearest(folder))
        return settings

    def root_settings(self, paths: Sequence[str | os.PathLike[str]]) -> Settings:
        """The settings of the paths' common folder (the cache, ``--show-settings``, the walk's excludes)."""
        return self.settings_for(config.common_start(paths))

    def enabled(self, settings: Settings) -> frozenset[str]:
        """The codes ``settings`` enable, after the command line's selection."""
        return config.resolve_selection([*settings.layers(), self.cli_layer])

    def codes_for(self, path: str) -> frozenset[str]:
        """The codes checked in ``path``: its settings' selection minus its per-file ignores."""
        settings = self.settings_for(path)
        enabled = self.enabled(settings)
        return enabled - config.ignored_codes(config.per_file_ignored(path, settings), enabled)

    def error_for(self, path: str | os.PathLike[str]) -> ConfigError | None:
        """The error of the configuration that judges ``path``, or None where its settings load."""
        try:
            self.settings_for(path)
        except ConfigError as exc:
            return exc
        return None

    def partition(self, files: Iterable[str]) -> tuple[list[str], dict[str, ConfigError]]:
        """``files`` whose settings load, in order, and each other file with its configuration's error."""
        judged: list[str] = []
        broken: dict[str, ConfigError] = {}
        for path in files:
            error = self.error_for(path)
            if error is None:
                judged.append(path)
            else:
                broken[path] = error
        return judged, broken

    def group(self, files: Iterable[str]) -> list[tuple[Settings, list[str]]]:
        """``files`` grouped by the settings that judge them, in order of first appearance."""
        groups: dict[int, tuple[Settings, list[str]]] = {}
        for path in files:
            settings = self.settings_for(path)
            groups.setdefault(id(settings), (settings, []))[1].append(path)
        return list(groups.values())


def excluded_by_own_settings(resolver: Resolver, path: str, exclude: Callable[[Settings], list[str]]) -> bool:
    """Whether a walked file is excluded by the ``exclude`` globs of the settings that judge it
    (a nested project's own ``exclude``), relative to that settings' root."""
    from accumlint.settings.discovery import is_force_excluded

    settings = resolver.settings_for(path)
    return is_force_excluded(path, exclude(settings), settings.project_root)
