"""``accumlint check --show-settings``: the settings in effect, as TOML one could paste back.

Shows where the settings come from, the project root, the rule codes that will run (after
the config file and the command line), the exclude globs, the per-file ignores and the
files the paths expand to; nothing is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from accumlint.config import Settings, default_codes


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def format_settings(
    settings: Settings,
    enabled: Iterable[str],
    excludes: Sequence[str],
    files: Sequence[str],
    *,
    output_format: str,
    fix: bool,
    unsafe_fixes: bool,
) -> str:
    """The resolved settings as TOML-like text (``# comments`` say where a value comes from)."""
    enabled = sorted(enabled)
    source = str(settings.config_path) if settings.config_path else "none found: the defaults"
    defaults = default_codes()
    lines = [
        f"# settings file: {source}",
        f"project-root = {json.dumps(str(settings.project_root))}",
        f"output-format = {json.dumps(output_format)}",
        f"fix = {str(fix).lower()}",
        f"unsafe-fixes = {str(unsafe_fixes).lower()}",
        "",
        "# the rules that run (config file, then the command line, applied to the defaults)",
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
