"""``accumlint check --show-settings``: the settings in effect, as TOML one could paste back.

Shows where the settings come from (with the files ``extend`` inherits and the keys each
gave), the project root, the run's options (where the report goes, fixes, ``--ignore-noqa``),
every ``[tool.accumlint]`` key as it applies after the command line (the cache folder,
``parse-timeout``, ``respect-gitignore``, ``noqa-style``), the rule codes that will run, the
exclude globs, the per-file ignores and the files the paths expand to; nothing is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from accumlint.settings.config import Settings, default_codes


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _toml_bool(value: bool) -> str:
    return str(value).lower()


def _inheritance(settings: Settings) -> list[str]:
    """Comment lines naming the files ``settings`` extend and the keys each of them gave."""
    if not settings.extends:
        return []
    lines = [f"# extends: {' -> '.join(str(path) for path in settings.extends)}"]
    for base in settings.extends:
        keys = sorted(key for key, files in settings.sources.items() if base in files and key != "extend")
        if keys:
            lines.append(f"# from {base}: {', '.join(keys)}")
    return lines


def format_settings(
    settings: Settings,
    enabled: Iterable[str],
    excludes: Sequence[str],
    files: Sequence[str],
    *,
    output_format: str,
    fix: bool,
    unsafe_fixes: bool,
    ignore_noqa: bool = False,
    output_file: str | None = None,
    output_file_from: str | None = None,
    cache_dir: Path | None = None,
    parse_timeout: float | None = None,
    respect_gitignore: bool | None = None,
) -> str:
    """The resolved settings as TOML-like text (``# comments`` say where a value comes from).

    ``output_file``: ``-o PATH`` (None: stdout), named by ``output_file_from`` when an environment
    variable gave it. ``cache_dir``: the cache folder as resolved (None: no cache). ``parse_timeout``
    (seconds, 0: none) and ``respect_gitignore`` as the command line set them; None: the
    configuration's value."""
    enabled = sorted(enabled)
    source = str(settings.config_path) if settings.config_path else "none found: the defaults"
    defaults = default_codes()
    if output_file is None:
        report_line = "# output-file: none, the report goes to stdout"
    else:
        origin = f"  # from {output_file_from}" if output_file_from else ""
        report_line = f"output-file = {json.dumps(output_file)}{origin}"
    seconds = settings.parse_timeout if parse_timeout is None else parse_timeout
    respect = settings.respect_gitignore if respect_gitignore is None else respect_gitignore
    lines = [
        f"# settings file: {source}",
        *_inheritance(settings),
        f"project-root = {json.dumps(str(settings.project_root))}",
        f"output-format = {json.dumps(output_format)}",
        report_line,
        f"fix = {_toml_bool(fix)}",
        f"unsafe-fixes = {_toml_bool(unsafe_fixes)}",
        f"ignore-noqa = {_toml_bool(ignore_noqa)}",
        "",
        f"cache-dir = {json.dumps(str(cache_dir))}" if cache_dir else "# cache-dir: none, the cache is off",
        f"parse-timeout = {seconds:g}",
        f"respect-gitignore = {_toml_bool(respect)}",
        f"noqa-style = {json.dumps(settings.noqa_style)}",
        "",
        "# the rules that run (the extended files, the config file, then the command line, applied to the defaults)"
        if settings.extends else "# the rules that run (config file, then the command line, applied to the defaults)",
        f"enabled = {_toml_list(enabled)}",
        f"# on by default but not enabled: {', '.join(sorted(defaults - set(enabled))) or 'none'}",
        f"# enabled but off by default: {', '.join(c for c in enabled if c not in defaults) or 'none'}",
        "",
        f"exclude = {_toml_list(excludes)}",
        f"extend-exclude = {_toml_list(settings.extend_exclude)}",
        "",
        "[per-file-ignores]",
        *(f"{json.dumps(glob)} = {_toml_list(codes)}" for glob, codes in settings.per_file_ignores.items()),
        "",
        f"# {len(files)} file{'s' if len(files) != 1 else ''} to check",
        f"files = {_toml_list(files)}",
    ]
    return "\n".join(lines)
