"""The ``accumlint`` command line: ``accumlint check [PATHS]...``, ``accumlint rule CODE`` and
``accumlint clean``.

Exit status: 0 no findings, 1 findings (``ACC000`` included) or an internal error,
2 a usage or configuration error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from accumlint import __version__, cache, config, registry, runner
from accumlint import cache_dir as cache_directory
from accumlint.config import ConfigError, SelectionLayer, Settings
from accumlint.discovery import DiscoveryError, discover, is_force_excluded
from accumlint.lazy import lazy_module
from accumlint.output import FORMATS, HUMAN_FORMATS, render, summary_line
from accumlint.show_settings import format_settings

# LibCST and the rules load only when a file is checked, fixed or a rule described
engine = lazy_module("accumlint.engine")
notebook = lazy_module("accumlint.notebook")
catalogue = lazy_module("accumlint.catalogue")

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


def _fail(message: str) -> None:
    """Print a one-line error to stderr and exit with status 2."""
    click.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(EXIT_ERROR)


def _split_codes(values: Iterable[str]) -> list[str]:
    """Flatten repeatable, comma-separated option values (``--select A,B --select C``)."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _use_color() -> bool:
    """Colors only on a terminal and only when ``NO_COLOR`` is unset or empty."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _lines(data: bytes) -> list[str]:
    try:
        text = engine.decode_source(data)
    except (SyntaxError, UnicodeDecodeError):
        text = data.decode("utf-8", errors="replace")
    # number lines as the parser does: only \n, \r\n and \r end a line
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _cli_layer(
    select: tuple[str, ...], ignore: tuple[str, ...], extend_select: tuple[str, ...]
) -> SelectionLayer:
    selected = _split_codes(select)
    if select and not selected:
        # an empty variable in a CI script must not silently switch every rule off
        raise ConfigError("--select: empty selection; give codes or prefixes (e.g. ACC0, ACC101) or ALL")
    return SelectionLayer(
        select=tuple(config.validate_selectors(selected, "--select")) if select else None,
        ignore=tuple(config.validate_selectors(_split_codes(ignore), "--ignore")),
        extend_select=tuple(config.validate_selectors(_split_codes(extend_select), "--extend-select")),
    )


_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=str),
    help="Use this pyproject.toml instead of searching for one.",
)
_cache_dir_option = click.option(
    "--cache-dir",
    envvar=cache.CACHE_DIR_ENV,
    type=click.Path(path_type=str),
    help=f"Cache directory (env {cache.CACHE_DIR_ENV}; default: {cache.CACHE_DIR_NAME} in the project root).",
)


def _cache_location(settings: Settings, cache_dir: str | None) -> Path:
    return cache.resolve_cache_dir(cache_dir, settings.cache_dir, settings.project_root)


def _parse_timeout(settings: Settings, option: float | None, jobs: int | None) -> float | None:
    """Seconds a file's check or fix may take in a worker; None: no limit (0, or ``--jobs 1``: no workers)."""
    seconds = settings.parse_timeout if option is None else option
    return None if jobs == 1 or not seconds else seconds


def _open_cache(settings: Settings, enabled: frozenset[str], option: str | None) -> cache.ResultCache | None:
    """The run's cache, or None (with a warning) where the location is not accumlint's to write."""
    try:
        protected = cache_directory.protected_paths(settings.project_root)
        directory = cache_directory.locate(_cache_location(settings, option), protected)
    except cache_directory.CacheDirError as exc:
        click.echo(f"warning: cache not used: {exc}", err=True)
        return None
    secret = cache.user_key()
    if secret is None:  # nowhere to keep this user's key (a home that cannot be written): no cache
        return None
    key = cache.fingerprint(
        enabled=enabled,
        per_file_ignores=settings.per_file_ignores,
        project_root=settings.project_root,
        registry=[entry.qualified_name for entry in registry.RULES],
    )
    return cache.ResultCache.load(directory, key, secret)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="accumlint", message="%(prog)s %(version)s")
def main() -> None:
    """accumlint: find gradient-accumulation bugs in PyTorch training code."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--select", multiple=True, metavar="CODES", help="Codes/prefixes to enable (replaces config).")
@click.option("--ignore", multiple=True, metavar="CODES", help="Codes/prefixes to disable.")
@click.option("--extend-select", multiple=True, metavar="CODES", help="Codes/prefixes to enable in addition.")
@click.option("--exclude", multiple=True, metavar="GLOBS", help="Globs to skip (replaces config `exclude`).")
@click.option(
    "--output-format", type=click.Choice(FORMATS), default="text", show_default=True, help="How to print."
)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option(
    "--force-exclude",
    is_flag=True,
    help="Apply the exclude globs to files named on the command line too (for pre-commit).",
)
@click.option("--fix", is_flag=True, help="Apply the safe fixes, then report what is left.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply the unsafe fixes (with --fix or --diff).")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff instead of writing them; exit 1 if any.")
@click.option(
    "--show-settings", is_flag=True, help="Print the settings in effect and the files to check; check nothing."
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the findings, no summary.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per code instead.")
@_config_option
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    metavar="N",
    help="Worker processes that parse files (default: one per CPU; 1: no workers).",
)
@click.option(
    "--parse-timeout",
    type=click.FloatRange(min=0, max=86400),
    metavar="SECONDS",
    help="A file whose check takes longer gets ACC000 (config `parse-timeout`; "
    f"default {config.DEFAULT_PARSE_TIMEOUT:g}; 0: no limit; none with --jobs 1).",
)
@click.option("-n", "--no-cache", is_flag=True, help="Neither read nor write the cache.")
@_cache_dir_option
def check(
    paths: tuple[str, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    extend_select: tuple[str, ...],
    exclude: tuple[str, ...],
    output_format: str,
    exit_zero: bool,
    force_exclude: bool,
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    show_settings: bool,
    quiet: bool,
    statistics: bool,
    config_path: str | None,
    jobs: int | None,
    parse_timeout: float | None,
    no_cache: bool,
    cache_dir: str | None,
) -> None:
    """Check PATHS (files or directories; default: the current directory)."""
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is written as its bytes
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
    targets = list(paths) or ["."]
    if fix and diff:
        _fail("--fix and --diff cannot be used together (--diff prints the fixes without writing them)")
    if unsafe_fixes and not (fix or diff):
        _fail("--unsafe-fixes needs --fix or --diff")
    try:
        settings = config.discover_settings(targets, config_path)
        layers = [settings.layer(), _cli_layer(select, ignore, extend_select)]
        enabled = config.resolve_selection(layers)
        excludes = _split_codes(exclude) if exclude else settings.exclude
        all_excludes = [*excludes, *settings.extend_exclude]
        files = discover(targets, exclude=all_excludes, root=settings.project_root)
        if force_exclude:
            files = [f for f in files if not is_force_excluded(f, all_excludes, settings.project_root)]
    except (ConfigError, DiscoveryError) as exc:
        _fail(str(exc))
        return

    if show_settings:
        text = format_settings(
            settings, enabled, excludes, files, output_format=output_format, fix=fix, unsafe_fixes=unsafe_fixes
        )
        click.echo(text)
        sys.exit(EXIT_OK)

    fixed = 0
    if fix or diff:
        from accumlint.fixes import apply as fixes  # LibCST: loaded only to fix

        results = fixes.fix_files(
            files,
            lambda path: enabled - config.ignored_codes(config.per_file_ignored(path, settings), enabled),
            unsafe=unsafe_fixes,
            write=not diff,
            trees=[settings.project_root, *(target for target in targets if os.path.isdir(target))],
            timeout=_parse_timeout(settings, parse_timeout, jobs),
        )
        fixed = sum(sum(r.applied.values()) for r in results if not r.error)
        if diff:
            patch = "".join(r.diff() for r in results)
            if patch:
                click.echo(patch, nl=False)
            for line in fixes.fix_summary(results, diff=True):
                click.echo(line, err=True)
            sys.exit(EXIT_FINDINGS if fixed else EXIT_OK)
        for line in fixes.fix_summary(results, diff=False):
            if not quiet or line.startswith("error: "):
                click.echo(line, err=True)

    results = None if no_cache else _open_cache(settings, enabled, cache_dir)
    timeout = _parse_timeout(settings, parse_timeout, jobs) or 0  # 0: none (None would mean the settings')
    run = runner.check_files(files, settings, enabled, jobs=jobs, cache=results, parse_timeout=timeout)
    for note in run.notes:
        click.echo(f"note: {note}", err=True)
    for warning in run.warnings:
        click.echo(f"warning: {warning}", err=True)
    findings, errors, sources = run.findings, run.errors, run.sources
    color = _use_color()

    def source_lines(path: str, cell: int = 0) -> list[str] | None:
        if path not in sources:
            return None
        return notebook.cell_lines(sources[path], cell) if cell else _lines(sources[path])

    body = render(findings, output_format, source_lines=source_lines, color=color, statistics=statistics)
    if body:
        click.echo(body, color=color)
    if output_format in HUMAN_FORMATS and not quiet and not statistics:
        if findings:
            click.echo("")
        summary = summary_line(len(findings), color=color)
        if fix and fixed:
            total = len(findings) + fixed
            summary = f"Found {total} finding{'s' if total != 1 else ''} ({fixed} fixed, {len(findings)} remaining)."
        click.echo(summary, color=color)
    for error in errors:
        click.echo(f"error: {error}", err=True)
    if errors:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK if exit_zero or not findings else EXIT_FINDINGS)


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule: code, name, severity, default.")
@click.option(
    "--output-format",
    type=click.Choice(("text", "json")),
    default="text",
    show_default=True,
    help="text: the rule page (a table with --all); json: the rule's metadata and page.",
)
def rule(code: str | None, show_all: bool, output_format: str) -> None:
    """Print the catalogue page of rule CODE (e.g. ACC001), or list all rules."""
    if show_all:
        infos = catalogue.rule_infos()
        if output_format == "json":
            click.echo(json.dumps([catalogue.rule_json(info) for info in infos], indent=2))
            return
        width = max(len(info.name) for info in infos)
        for info in infos:
            default = "on" if info.default_enabled else "off"
            severity = info.severity.value
            click.echo(f"{info.code}  {info.name:<{width}}  {severity:<7}  {default:<3}  {info.summary}")
        return
    if code is None:
        _fail("give a rule code (e.g. `accumlint rule ACC001`) or --all")
        return
    info = catalogue.rule_info(code)
    if info is None:
        valid = ", ".join(i.code for i in catalogue.rule_infos())
        _fail(f"unknown rule code {code!r}; valid codes: {valid}")
        return
    if output_format == "json":
        click.echo(json.dumps(catalogue.rule_json(info), indent=2))
        return
    page = catalogue.rule_page(info)
    if page is None:
        click.echo(f"{info.code} {info.name} [{info.severity.value}]: {info.summary}")
        if info.url:
            click.echo(f"see: {info.url}")
        click.echo(f"note: the catalogue page of {info.code} is not installed", err=True)
        return
    click.echo(page.rstrip("\n"))


@main.command()
@_config_option
@_cache_dir_option
def clean(config_path: str | None, cache_dir: str | None) -> None:
    """Remove the cache of the project in the current directory: only the files accumlint wrote,
    then its directory if that left it empty."""
    try:
        settings = config.discover_settings(["."], config_path)
        location = _cache_location(settings, cache_dir)
        removed = cache_directory.clean(location, cache_directory.protected_paths(settings.project_root))
    except (ConfigError, cache_directory.CacheDirError) as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(f"{exc.filename or ''}: cannot remove the cache ({exc.strerror or exc})")
        return
    if removed is None:
        click.echo(f"No cache at {location}")
        return
    directory, kept = removed
    if kept:
        click.echo(f"Removed accumlint's files from {directory}; kept {len(kept)} it did not write ({kept[0]}, ...)")
    else:
        click.echo(f"Removed {directory}")
