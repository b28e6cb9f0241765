"""The ``accumlint`` command line: ``accumlint check [PATHS]...``, ``accumlint rule CODE`` and
``accumlint clean``.

Exit status: 0 no findings, 1 findings (``ACC000`` included) or an internal error,
2 a usage or configuration error.

The module is long because ``check`` declares ruff's option set (about 40 click options) and
their wiring; the work behind each option lives in its own module (``runner``, ``config``,
``output``, ``fixes``, ``add_noqa``, ``show_settings``, ``watch``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from accumlint import __version__
from accumlint.cli import colors
from accumlint.commands import watch as watching
from accumlint.commands.show_settings import format_settings
from accumlint.files import writing
from accumlint.files.reading import decode_source, read_stream, source_limit, too_large_reason
from accumlint.lazy import lazy_module
from accumlint.noqa import suppression
from accumlint.report.output import (
    FIX_FORMATS,
    FORMATS,
    HUMAN_FORMATS,
    Fixes,
    fixable_counts,
    not_fully_checked,
    render,
    summary_line,
)
from accumlint.run import cache, runner
from accumlint.run import cache_dir as cache_directory
from accumlint.run.suggested_fixes import FIXABLE_CODES
from accumlint.settings import config
from accumlint.settings.config import ConfigError, SelectionLayer, Settings
from accumlint.settings.discovery import DiscoveryError, discover, is_force_excluded
from accumlint.settings.hierarchy import Resolver, excluded_by_own_settings
from accumlint.spec import registry
from accumlint.spec.findings import Finding, LoopVerdict
from accumlint.spec.registry import PARSE_ERROR_CODE

# LibCST and the rules load only when a file is checked, fixed or a rule described
engine = lazy_module("accumlint.pipeline.engine")
notebook = lazy_module("accumlint.pipeline.notebook")
catalogue = lazy_module("accumlint.report.catalogue")

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
#: the default of ``-o/--output-file`` (as ruff's ``RUFF_OUTPUT_FILE``)
OUTPUT_FILE_ENV = "ACCUMLINT_OUTPUT_FILE"


def _fail(message: str) -> None:
    """Print a one-line error to stderr and exit with status 2."""
    click.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(EXIT_ERROR)


def _split_codes(values: Iterable[str]) -> list[str]:
    """Flatten repeatable, comma-separated option values (``--select A,B --select C``)."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _use_color(mode: str = "auto") -> bool:
    """See :func:`accumlint.cli.colors.use_color`."""
    return colors.use_color(mode)


def _lines(data: bytes) -> list[str]:
    try:
        text = decode_source(data)
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


def _parse_timeout(settings: Settings, option: float | None) -> float | None:
    """Seconds a file's check or fix may take in a worker (with ``--jobs 1`` too); None: no limit (0)."""
    seconds = settings.parse_timeout if option is None else option
    return seconds or None


def _open_cache(settings: Settings, enabled: frozenset[str], option: str | None,
                ignore_noqa: bool) -> cache.ResultCache | None:
    """The run's cache (its key holds ``--ignore-noqa``), or None (with a warning) where the
    location is not accumlint's to write."""
    secret = cache.user_key()
    if secret is None:  # nowhere to keep this user's key (a home that cannot be written): no cache
        return None
    try:
        protected = cache_directory.protected_paths(settings.project_root)
        directory = cache_directory.locate(_cache_location(settings, option), protected, secret)
    except cache_directory.CacheDirError as exc:
        click.echo(f"warning: cache not used: {exc}", err=True)
        return None
    key = cache.fingerprint(
        enabled=enabled,
        per_file_ignores=settings.per_file_ignores,
        project_root=settings.project_root,
        registry=[entry.qualified_name for entry in registry.RULES],
        ignore_noqa=ignore_noqa,
    )
    return cache.ResultCache.load(directory, key, secret)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="accumlint", message="%(prog)s %(version)s")
def main() -> None:
    """accumlint: find gradient-accumulation bugs in PyTorch training code."""


_check_config_option = click.option(
    "--config",
    "config_args",
    multiple=True,
    metavar="FILE|KEY=VALUE",
    help="A pyproject.toml to use for every file instead of the nearest one, or a TOML `key = value` "
    "overriding one [tool.accumlint] key (repeatable).",
)


class _CheckCommand(click.Command):
    """``check``, reading ruff's ``--add-noqa[=REASON]``: a reason only glued with ``=``, so that
    in ``--add-noqa .`` the ``.`` stays a path."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """The arguments, ``--add-noqa=REASON`` read as ``--add-noqa --add-noqa-reason=REASON``."""
        rewritten: list[str] = []
        for index, arg in enumerate(args):
            if arg == "--":  # only paths follow
                rewritten += args[index:]
                break
            if arg.startswith("--add-noqa="):
                rewritten += ["--add-noqa", f"--add-noqa-reason={arg.partition('=')[2]}"]
            else:
                rewritten.append(arg)
        return super().parse_args(ctx, rewritten)


class _ReportFile:
    """Where the report goes: stdout (stderr where stdout holds the fixed source), or with
    ``-o PATH`` (or ``$ACCUMLINT_OUTPUT_FILE``: ``from_env``) that file, written once at the end of
    the run by the one safe writer (:func:`accumlint.files.writing.write_file`: atomically, never
    through a link to anything but a regular file)."""

    def __init__(self, path: str | None, *, from_env: bool = False) -> None:
        self.path = path
        self.from_env = from_env
        self.parts: list[str] = []
        # errors name what gave the path: a variable set long ago is otherwise hard to find
        self.label = f"{OUTPUT_FILE_ENV}={path}" if from_env else f"--output-file {path}"

    def echo(self, text: str, *, color: bool = False, err: bool = False) -> None:
        """One line (or block) of the report."""
        if self.path is None:
            click.echo(text, color=color, err=err)
        else:
            self.parts.append(f"{text}\n")

    def check_target(self) -> None:
        """Refuse, before the run, a path the report cannot be written to (exit 2)."""
        if self.path is None:
            return
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            _fail(f"{self.label}: no such directory: {parent}")
        if os.path.lexists(self.path) and not os.path.isfile(self.path):
            what = "a broken link" if not os.path.exists(self.path) else "not a regular file"
            _fail(f"{self.label}: {what}")

    def save(self) -> None:
        """Write the report to the file (nothing without ``-o``); exit 2 where it cannot be written."""
        if self.path is None:
            return
        try:
            writing.write_file(self.path, "".join(self.parts).encode("utf-8", errors="surrogateescape"))
        except OSError as exc:
            _fail(f"{self.label}: cannot write the report: {exc.strerror or exc}")


@main.command(cls=_CheckCommand, short_help="Check files and folders for accumulation bugs.")
# readable=False: an unreadable file is the run's ACC000 (its reason, the other files checked), not a usage error
@click.argument("paths", nargs=-1, type=click.Path(path_type=str, readable=False))
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
    help="Apply the exclude globs (and .gitignore) to files named on the command line too (for pre-commit).",
)
@click.option("--fix", is_flag=True, help="Apply the safe fixes, then report what is left.")
@click.option(
    "--fix-only", is_flag=True, help="Apply the safe fixes and report nothing of what is left (exit 0); implies --fix."
)
@click.option(
    "--exit-non-zero-on-fix",
    is_flag=True,
    help="Exit 1 when --fix or --fix-only changed a file, even if nothing is left.",
)
@click.option("--unsafe-fixes", is_flag=True, help="Also apply the unsafe fixes (with --fix or --diff).")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff instead of writing them; exit 1 if any.")
@click.option("--show-fixes", is_flag=True, help="List the fixes applied (--fix), or show each finding's fix.")
@click.option(
    "--add-noqa",
    is_flag=True,
    help="Add `# noqa: CODE` (or `# accumlint: noqa: CODE` under `noqa-style = \"accumlint\"`) on the line of "
    "every finding (in a notebook, in its cell); `--add-noqa=REASON` writes the reason after the codes.",
)
@click.option("--add-noqa-reason", hidden=True, metavar="REASON")
@click.option("--ignore-noqa", is_flag=True, help="Apply no `# noqa` directive (nor `# accumlint: noqa`).")
@click.option(
    "-o",
    "--output-file",
    envvar=OUTPUT_FILE_ENV,
    type=click.Path(path_type=str, dir_okay=False),
    metavar="PATH",
    help=f"Write the report to PATH (replaced atomically; its folder must exist) instead of stdout "
    f"(env {OUTPUT_FILE_ENV}).",
)
@click.option(
    "--show-settings", is_flag=True, help="Print the settings in effect and the files to check; check nothing."
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the findings, no summary.")
@click.option("--statistics", is_flag=True,
              help="Print the number of findings per code instead, and the accumulation loops decided and "
              "undecided (by reason).")
@_check_config_option
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option(
    "--respect-gitignore/--no-respect-gitignore",
    default=None,
    help="Skip what git ignores when walking directories (default: on; config `respect-gitignore`).",
)
@click.option(
    "--stdin-filename",
    metavar="PATH",
    help="With `check -`: the name of the source read from stdin (config, per-file-ignores, notebook).",
)
@click.option(
    "--color",
    "color_mode",
    type=click.Choice(colors.MODES),
    default="auto",
    show_default=True,
    help="Colors: auto (a terminal, unless NO_COLOR; FORCE_COLOR forces them), always or never.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    metavar="N",
    help="Worker processes that parse files (default: one per CPU), each bounded to 1 GiB.",
)
@click.option(
    "--parse-timeout",
    type=click.FloatRange(min=0, max=86400),
    metavar="SECONDS",
    help="A file whose check takes longer gets ACC000 (config `parse-timeout`; "
    f"default {config.DEFAULT_PARSE_TIMEOUT:g}; 0: no limit).",
)
@click.option("-n", "--no-cache", is_flag=True, help="Neither read nor write the cache.")
@_cache_dir_option
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="Check again whenever a Python file, notebook or TOML file under PATHS changes; Ctrl-C stops "
    "(exit 0). Needs the watchfiles package.",
)
def check(output_file: str | None, ignore_noqa: bool, watch: bool, **options: Any) -> None:
    """Check PATHS (files or directories; default: the current directory; `-`: stdin)."""
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is written as its bytes
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
    if ignore_noqa and options["add_noqa"]:
        _fail("--add-noqa cannot be used with --ignore-noqa")
    source = click.get_current_context().get_parameter_source("output_file")
    from_env = source is click.core.ParameterSource.ENVIRONMENT
    _ReportFile(output_file or None, from_env=from_env).check_target()

    def run_once() -> None:
        report = _ReportFile(output_file or None, from_env=from_env)
        try:
            _check(report=report, ignore_noqa=ignore_noqa, **options)
        except SystemExit as done:
            if done.code != EXIT_ERROR:  # a usage or configuration error leaves no report
                report.save()
            raise
        report.save()

    if watch:
        sys.exit(_watch(run_once, options))
    run_once()


def _watch(run_once: Callable[[], None], options: dict[str, Any]) -> int:
    """``check --watch``: ``run_once`` (one whole ``check``), then again on each change to a watched
    file under the paths, until Ctrl-C (exit 0). Exit 2 where a watch makes no sense or cannot run."""
    refused = [name for name, given in (("--add-noqa", options["add_noqa"] or options["add_noqa_reason"]),
                                        ("--show-settings", options["show_settings"])) if given]
    targets = list(options["paths"]) or ["."]
    if "-" in targets:
        _fail("--watch needs files or folders to watch, not stdin (`-`)")
    if refused:
        _fail(f"--watch cannot be used with {refused[0]} (it runs once)")
    try:
        changes = watching.file_changes(targets)
    except watching.WatchUnavailable as exc:
        _fail(str(exc))
        return EXIT_ERROR
    return watching.watch(_exit_status(run_once), changes, echo=lambda line: click.echo(line, err=True),
                          clear=click.clear)


def _exit_status(run_once: Callable[[], None]) -> Callable[[], int]:
    """``run_once`` as a function that returns its exit status instead of leaving the process:
    a watch goes on after a run with findings or a configuration error."""

    def run() -> int:
        try:
            run_once()
        except SystemExit as done:
            return done.code if isinstance(done.code, int) else EXIT_ERROR if done.code else EXIT_OK
        return EXIT_OK

    return run


def _check(
    paths: tuple[str, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    extend_select: tuple[str, ...],
    exclude: tuple[str, ...],
    output_format: str,
    exit_zero: bool,
    force_exclude: bool,
    fix: bool,
    fix_only: bool,
    exit_non_zero_on_fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    show_fixes: bool,
    add_noqa: bool,
    add_noqa_reason: str | None,
    show_settings: bool,
    quiet: bool,
    statistics: bool,
    config_args: tuple[str, ...],
    isolated: bool,
    respect_gitignore: bool | None,
    stdin_filename: str | None,
    color_mode: str,
    jobs: int | None,
    parse_timeout: float | None,
    no_cache: bool,
    cache_dir: str | None,
    report: _ReportFile,
    ignore_noqa: bool = False,
) -> None:
    """``check`` itself, its report written to ``report``; ``ignore_noqa``: no directive applies."""
    targets = list(paths) or ["."]
    if fix and diff:
        _fail("--fix and --diff cannot be used together (--diff prints the fixes without writing them)")
    fix_only = fix_only and not diff  # as ruff's: --diff implies --fix-only
    fix = fix or fix_only
    if unsafe_fixes and not (fix or diff):
        _fail("--unsafe-fixes needs --fix or --diff")
    if exit_zero and exit_non_zero_on_fix:
        _fail("--exit-zero and --exit-non-zero-on-fix cannot be used together")
    if add_noqa_reason is not None:
        add_noqa = True
        add_noqa_reason = _noqa_reason(add_noqa_reason)
    if add_noqa and (fix or diff):
        _fail("--add-noqa cannot be used with --fix, --fix-only or --diff")
    if "-" in targets and len(targets) > 1:
        _fail("`-` (stdin) cannot be combined with other paths")
    # a file gets no color codes (as ruff's --output-file)
    color = colors.use_color(color_mode) and report.path is None
    try:
        resolver = _resolver(config_args, isolated, _cli_layer(select, ignore, extend_select))
        if targets == ["-"]:
            if add_noqa:
                _fail("--add-noqa needs files, not stdin")
            _check_stdin(resolver, stdin_filename, output_format, _FixMode(fix, fix_only, diff, exit_non_zero_on_fix),
                         unsafe_fixes, force_exclude, exclude, exit_zero, quiet, statistics, show_fixes, color, report,
                         ignore_noqa)
            return
        settings = resolver.root_settings(targets)
        enabled = resolver.enabled(settings)
        files, excludes = _discover(resolver, settings, targets, exclude, force_exclude, respect_gitignore)
    except (ConfigError, DiscoveryError) as exc:
        _fail(str(exc))
        return

    if show_settings:
        text = format_settings(
            settings, enabled, excludes, files, output_format=output_format, fix=fix, unsafe_fixes=unsafe_fixes,
            ignore_noqa=ignore_noqa, output_file=report.path,
            output_file_from=OUTPUT_FILE_ENV if report.from_env else None,
            cache_dir=None if no_cache else _cache_location(settings, cache_dir),
            parse_timeout=_parse_timeout(settings, parse_timeout) or 0,
            respect_gitignore=respect_gitignore,
        )
        report.echo(text)
        sys.exit(EXIT_OK)
    if not files:  # as ruff says: a wrong path or an exclude that hides everything must not pass silently
        click.echo("warning: No Python files found under the given path(s)", err=True)
    # a file judged by a configuration that cannot be loaded is reported, the others are checked
    files, misconfigured = resolver.partition(files)

    fixed = 0
    refused: set[str] = set()  # files whose fixes were not written: their findings are not "fixable"
    # a rewrite reaches through a symlink only into the paths the user named (not the project root or cwd)
    boundary = writing.Boundary(targets)
    if fix or add_noqa:
        writing.remove_stale_temporaries(files, boundary)  # a killed run's temporary files
    try:
        codes_for = _memo(resolver.codes_for)
        if fix or diff:
            from accumlint.run import apply_fixes as fixes  # LibCST: loaded only to fix

            fix_results = fixes.fix_files(
                files, codes_for, unsafe=unsafe_fixes, write=not diff, boundary=boundary,
                timeout=_parse_timeout(settings, parse_timeout), ignore_noqa=ignore_noqa,
            )
            refused = {r.path for r in fix_results if r.error}
            fixed = sum(sum(r.applied.values()) for r in fix_results if not r.error)
            if diff:
                patch = "".join(r.diff() for r in fix_results)
                if patch:
                    click.echo(patch, nl=False)
                for line in fixes.fix_summary(fix_results, diff=True):
                    click.echo(line, err=True)
                sys.exit(EXIT_FINDINGS if fixed else EXIT_OK)
            for line in fixes.fix_summary(fix_results, diff=False):
                if not quiet or line.startswith("error: "):
                    click.echo(line, err=True)
            if show_fixes:
                for line in fixed_listing(fix_results):
                    click.echo(line, err=True)
            if fix_only:  # nothing about what is left: no check after the fixes
                _fixed_only(report, fixed, quiet)
                failed = any(r.error for r in fix_results) or (exit_non_zero_on_fix and fixed)
                sys.exit(EXIT_FINDINGS if failed else EXIT_OK)
        run = _run_groups(resolver, files, jobs, None if no_cache else cache_dir, no_cache, parse_timeout,
                          suggest=_shows_fixes(output_format, statistics), ignore_noqa=ignore_noqa)
    except ConfigError as exc:
        _fail(str(exc))
        return
    _report_misconfigured(run, misconfigured, PARSE_ERROR_CODE in enabled)
    for note in run.notes:
        click.echo(f"note: {note}", err=True)
    for warning in run.warnings:
        click.echo(f"warning: {warning}", err=True)
    findings, errors, sources = run.findings, run.errors, run.sources

    if add_noqa:
        from accumlint.commands.add_noqa import add_noqa_files

        added, noqa_errors = add_noqa_files(findings, sources, boundary=boundary, reason=add_noqa_reason or "",
                                            style_for=lambda path: resolver.settings_for(path).noqa_style)
        for error in [*errors, *noqa_errors]:
            click.echo(f"error: {error}", err=True)
        click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
        left = [f for f in findings if f.code in suppression.UNSUPPRESSIBLE]
        if left:
            click.echo(
                f"{len(left)} finding{'s' if len(left) != 1 else ''} of ACC000 cannot take a directive;"
                " fix or exclude them.",
                err=True,
            )
        sys.exit(EXIT_FINDINGS if errors or noqa_errors else EXIT_OK)

    def source_lines(path: str, cell: int = 0) -> list[str] | None:
        if path not in sources:
            return None
        return notebook.cell_lines(sources[path], cell) if cell else _lines(sources[path])

    # after --fix what is left of a declared fix failed its test: the report shows only fixes that pass it
    suggested = _suggest(findings, sources, codes_for, output_format, statistics, run.projects, run,
                         verified=show_fixes or fix, ignore_noqa=ignore_noqa)
    if suggested and refused:
        suggested = {finding: fix for finding, fix in suggested.items() if finding.path not in refused}
    _report(findings, output_format, source_lines, suggested, unsafe_fixes, show_fixes, statistics, quiet,
            color, fixed=fixed if fix else 0, incomplete=run.incomplete, report=report, loops=run.loops)
    _not_fully_checked(errors, run.incomplete)
    if errors or run.incomplete or (exit_non_zero_on_fix and fixed):
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK if exit_zero or not findings else EXIT_FINDINGS)


def _noqa_reason(reason: str) -> str:
    """``--add-noqa=REASON``, checked: one line, and not starting with what reads as a code."""
    reason = reason.strip()
    if any(ord(char) < 32 or ord(char) == 127 for char in reason):
        _fail("--add-noqa=REASON: the reason must be one line of text (no control characters)")
    if suppression.reads_as_a_code(reason):
        _fail(f"--add-noqa=REASON: {reason.split()[0]!r} would be read as one more code of the directive; "
              "start the reason with a word")
    return reason


@dataclass(frozen=True)
class _FixMode:
    """What ``check`` does with the fixes: ``fix`` (``--fix``, ``--fix-only``), ``only`` (report
    nothing else), ``diff`` (print them), ``exit_non_zero`` (``--exit-non-zero-on-fix``)."""

    fix: bool
    only: bool
    diff: bool
    exit_non_zero: bool


def _fixed_only(report: _ReportFile, fixed: int, quiet: bool) -> None:
    """``--fix-only``'s whole report, as ruff's: ``Fixed N findings.`` where a fix was applied."""
    if fixed and not quiet:
        report.echo(f"Fixed {fixed} finding{'s' if fixed != 1 else ''}.")


def _not_fully_checked(errors: Iterable[str], incomplete: dict[str, list[str]]) -> None:
    """The internal errors and why each file that was not fully checked was not, on stderr."""
    for error in errors:
        click.echo(f"error: {error}", err=True)
    for path, reasons in incomplete.items():
        for reason in reasons:
            click.echo(f"warning: {path}: not fully checked: {reason}", err=True)


def _report_misconfigured(run: runner.RunResult, misconfigured: dict[str, ConfigError], as_finding: bool) -> None:
    """Each file whose configuration cannot be loaded, into ``run``: unchecked, with the error as its
    ``ACC000`` (``as_finding``: the code is enabled) or else as why it was not fully checked."""
    for path, error in misconfigured.items():
        if as_finding:
            reason = f"its configuration is invalid: {error}"
            run.findings.append(runner.not_checked(path, reason, "fix that pyproject.toml, or exclude the folder"))
        else:
            run.incomplete[path] = [f"its configuration is invalid: {error}"]


def _memo(function: Callable[[str], frozenset[str]]) -> Callable[[str], frozenset[str]]:
    cached: dict[str, frozenset[str]] = {}

    def wrapper(path: str) -> frozenset[str]:
        if path not in cached:
            cached[path] = function(path)
        return cached[path]

    return wrapper


def _resolver(config_args: tuple[str, ...], isolated: bool, cli_layer: SelectionLayer) -> Resolver:
    """``--config`` values: a file (at most one) or ``KEY=VALUE`` overrides; ``--isolated``: no file."""
    files = [arg for arg in config_args if "=" not in arg or os.path.isfile(arg)]
    overrides: dict = {}
    for arg in config_args:
        if arg not in files:
            overrides.update(config.parse_override(arg))
    if len(files) > 1:
        raise ConfigError(f"--config: give one configuration file, not {len(files)}")
    if isolated and files:
        raise ConfigError("--isolated ignores configuration files: it cannot be used with --config FILE")
    return Resolver(config_path=files[0] if files else None, isolated=isolated, overrides=overrides,
                    cli_layer=cli_layer)


def _excludes(settings: Settings, exclude: tuple[str, ...]) -> list[str]:
    return [*(_split_codes(exclude) if exclude else settings.exclude), *settings.extend_exclude]


def _discover(
    resolver: Resolver,
    settings: Settings,
    targets: list[str],
    exclude: tuple[str, ...],
    force_exclude: bool,
    respect_gitignore: bool | None,
) -> tuple[list[str], list[str]]:
    """The files to check, and the exclude globs of the paths' own settings (for --show-settings).

    Walks skip what git ignores (unless turned off) and what each file's own settings exclude;
    with ``force_exclude`` the files named on the command line are filtered the same way."""
    respect = settings.respect_gitignore if respect_gitignore is None else respect_gitignore
    ignored = None
    if respect:
        from accumlint.settings.gitignore import GitIgnore  # pathspec: loaded only to walk

        ignored = GitIgnore()
    all_excludes = _excludes(settings, exclude)
    walked_ignore = ignored.ignored_in_walk if ignored is not None else None
    files = discover(targets, exclude=all_excludes, root=settings.project_root, ignore=walked_ignore)
    explicit = {os.path.normpath(t) for t in targets if not os.path.isdir(t)}

    def own_exclude(path: str) -> bool:
        if resolver.error_for(path) is not None or resolver.settings_for(path) is settings:
            return False  # (a file whose configuration is broken is kept: the check reports it)
        return excluded_by_own_settings(resolver, path, lambda s: _excludes(s, exclude))

    files = [f for f in files if f in explicit or not own_exclude(f)]
    def force_excluded(path: str) -> bool:
        if resolver.error_for(path) is not None:
            return False
        own = resolver.settings_for(path)
        if is_force_excluded(path, _excludes(own, exclude), own.project_root):
            return True
        return ignored is not None and ignored.ignored(path, False)

    if force_exclude:
        files = [f for f in files if f not in explicit or not force_excluded(f)]
    return files, all_excludes


def _run_groups(
    resolver: Resolver, files: list[str], jobs: int | None, cache_dir: str | None, no_cache: bool,
    parse_timeout: float | None = None, *, suggest: bool = False, ignore_noqa: bool = False,
) -> runner.RunResult:
    """Check ``files``, each group of files with the settings that judge them (and their own cache);
    ``suggest``: the checks compute their findings' fixes; ``ignore_noqa``: no directive applies."""
    total = runner.RunResult()
    for settings, group in resolver.group(files):
        enabled = resolver.enabled(settings)
        results = None if no_cache else _open_cache(settings, enabled, cache_dir, ignore_noqa)
        timeout = _parse_timeout(settings, parse_timeout) or 0  # 0: none (None would mean the settings')
        run = runner.check_files(group, settings, enabled, jobs=jobs, cache=results, parse_timeout=timeout,
                                 suggest=suggest, ignore_noqa=ignore_noqa)
        total.findings += run.findings
        total.loops += run.loops
        total.notes += run.notes
        total.errors += run.errors
        total.incomplete.update(run.incomplete)
        total.warnings += run.warnings
        total.sources.update(run.sources)
        total.projects.update(run.projects)
        total.cached += run.cached
        total.parsed += run.parsed
        total.suggested |= run.suggested
        total.fixes.update(run.fixes)
    return total


def _shows_fixes(output_format: str, statistics: bool) -> bool:
    """Whether the output shows the findings' fixes (so computing them is worth it)."""
    return output_format in FIX_FORMATS or statistics


def _suggest(
    findings: list[Finding],
    sources: dict[str, bytes],
    codes_for: Callable[[str], frozenset[str]],
    output_format: str,
    statistics: bool,
    projects: dict | None = None,
    checked: runner.RunResult | engine.FileResult | None = None,
    *,
    verified: bool = False,
    ignore_noqa: bool = False,
) -> Fixes | None:
    """Each finding's own fix, where the output shows fixes (LibCST loads only when a finding has
    one): as its rule proposes it, or with ``verified`` (``--show-fixes``, which prints the edits)
    only the fixes that pass the test ``--fix`` applies, each checked again here, outside the
    checks' time limit. ``projects``: the project index each file was checked in. ``checked``: a
    run or a check whose fixes were computed where the check held their nodes; only the files it
    did not check (answered from the cache) are parsed again for theirs, and one whose fixes
    cannot be computed is recorded as not fully checked in it. ``ignore_noqa``: the run's ``--ignore-noqa``."""
    if not _shows_fixes(output_format, statistics):
        return None
    if not any(f.code in FIXABLE_CODES for f in findings):
        return {}
    fixes: dict = {}
    done: set[str] = set()
    if isinstance(checked, runner.RunResult):
        fixes, done = dict(checked.fixes), checked.suggested
    elif checked is not None and checked.fixes is not None:
        fixes, done = dict(checked.fixes), {checked.path}
    rest = [f for f in findings if f.path not in done]
    if any(f.code in FIXABLE_CODES for f in rest):
        from accumlint.run.suggested_fixes import suggest_run

        incomplete: dict[str, list[str]] = {}
        fixes.update(suggest_run(rest, sources, codes_for, projects, incomplete, ignore_noqa=ignore_noqa))
        for path, reasons in incomplete.items():
            if isinstance(checked, runner.RunResult):
                checked.incomplete.setdefault(path, []).extend(reasons)
            elif checked is not None:
                checked.incomplete.extend(reasons)
    if verified and fixes:
        from accumlint.run.suggested_fixes import verify_run

        fixes = verify_run(fixes, findings, sources, codes_for, projects, ignore_noqa=ignore_noqa)
    return fixes


def _report(
    findings: list[Finding],
    output_format: str,
    source_lines: Callable[..., list[str] | None],
    suggested: Fixes | None,
    unsafe_fixes: bool,
    show_fixes: bool,
    statistics: bool,
    quiet: bool,
    color: bool,
    *,
    fixed: int = 0,
    err: bool = False,
    incomplete: dict[str, list[str]] | None = None,
    report: _ReportFile | None = None,
    loops: Sequence[LoopVerdict] = (),
) -> None:
    """Print the findings in ``output_format`` and, for people, the summary (on stderr with ``err``)
    to ``report`` (default: stdout); ``incomplete``: the files that were not fully checked, and why;
    ``loops``: the accumulation loops with their undecided reasons, counted by ``--statistics``."""
    out = report or _ReportFile(None)
    body = render(
        findings,
        output_format,
        source_lines=source_lines,
        color=color,
        statistics=statistics,
        fixes=suggested,
        unsafe=unsafe_fixes,
        show_fixes=show_fixes,
        incomplete=incomplete,
        loops=loops,
    )
    if body:
        out.echo(body, color=color, err=err)
    if output_format in HUMAN_FORMATS and not quiet and not statistics:
        if findings:
            out.echo("", err=err)
        now, more = fixable_counts(findings, suggested, unsafe_fixes)
        unchecked = len(incomplete or ())
        summary = summary_line(len(findings), color=color, fixable=now, unsafe_fixable=more, incomplete=unchecked)
        if fixed:
            total = len(findings) + fixed
            summary = f"Found {total} finding{'s' if total != 1 else ''} ({fixed} fixed, {len(findings)} remaining)."
            summary += f" {not_fully_checked(unchecked)}" if unchecked else ""
        out.echo(summary, color=color, err=err)


def fixed_listing(results: Iterable[object]) -> list[str]:
    """``--fix --show-fixes``: what was fixed, per file and code (ruff's "Fixed N errors:")."""
    rows = [(r.path, code, n) for r in results if not r.error for code, n in sorted(r.applied.items())]  # type: ignore[attr-defined]
    if not rows:
        return []
    total = sum(n for _, _, n in rows)
    lines = [f"Fixed {total} finding{'s' if total != 1 else ''}:"]
    current = None
    for path, code, n in rows:
        if path != current:
            lines.append(f"- {path}:")
            current = path
        lines.append(f"    {n} × {code}")
    return lines


def _check_stdin(
    resolver: Resolver,
    stdin_filename: str | None,
    output_format: str,
    mode: _FixMode,
    unsafe_fixes: bool,
    force_exclude: bool,
    exclude: tuple[str, ...],
    exit_zero: bool,
    quiet: bool,
    statistics: bool,
    show_fixes: bool,
    color: bool,
    report: _ReportFile,
    ignore_noqa: bool = False,
) -> None:
    """``check -``: the source on stdin, judged as the file ``--stdin-filename`` names (its settings,
    per-file ignores, notebook or not). ``--fix``: the fixed source on stdout, the findings left on
    stderr (``--fix-only``: no findings); ``--diff``: the fixes as a diff on stdout. With
    ``--force-exclude`` an excluded name is not checked (``--fix`` echoes the source)."""
    path = stdin_filename or "-"
    limit = source_limit(path)
    data = read_stream(sys.stdin.buffer, limit)  # `check - < /dev/zero` must not read without end
    if (mode.fix or mode.diff) and len(data) > limit:  # a prefix must not be echoed as the source
        _fail(f"{path}: stdin not fixed: {too_large_reason(None, limit)}")
    settings = resolver.settings_for(path if stdin_filename else ".")
    excluded = stdin_filename and is_force_excluded(path, _excludes(settings, exclude), settings.project_root)
    if force_exclude and excluded:
        if mode.fix:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        sys.exit(EXIT_OK)
    codes = resolver.codes_for(path) if stdin_filename else resolver.enabled(settings)
    if len(data) > limit:
        alone = runner.parse_error_result(path, runner.too_large(path, None, limit), codes)
        incomplete = {path: alone.incomplete} if alone.incomplete else {}
        _report(alone.findings, output_format, lambda *_: None, None, unsafe_fixes, show_fixes, statistics, quiet,
                color, incomplete=incomplete, report=report)
        _not_fully_checked((), incomplete)
        sys.exit(EXIT_FINDINGS if incomplete or (alone.findings and not exit_zero) else EXIT_OK)
    fixed = 0
    if mode.fix or mode.diff:
        fixed, data = _fix_stdin(path, data, codes, mode, unsafe_fixes, settings.parse_timeout or None, ignore_noqa)
    if mode.only:  # stdout holds the source, and nothing else
        sys.exit(EXIT_FINDINGS if mode.exit_non_zero and fixed else EXIT_OK)
    outcome = runner.check_one(path, data, codes, str(settings.project_root) if stdin_filename else None,
                               suggest=_shows_fixes(output_format, statistics), timeout=settings.parse_timeout or None,
                               ignore_noqa=ignore_noqa)
    findings = outcome.findings

    def source_lines(_: str, cell: int = 0) -> list[str] | None:
        return notebook.cell_lines(data, cell) if cell else _lines(data)

    suggested = _suggest(findings, {path: data}, lambda _: codes, output_format, statistics, checked=outcome,
                         verified=show_fixes or mode.fix, ignore_noqa=ignore_noqa)
    incomplete = {} if outcome.fully_checked else {path: outcome.incomplete}
    _report(findings, output_format, source_lines, suggested, unsafe_fixes, show_fixes, statistics, quiet, color,
            fixed=fixed, err=mode.fix, incomplete=incomplete, report=report, loops=outcome.loops)
    _not_fully_checked(outcome.internal_errors, incomplete)
    if incomplete or (mode.exit_non_zero and fixed):
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK if exit_zero or not findings else EXIT_FINDINGS)


def _fix_stdin(path: str, data: bytes, codes: frozenset[str], mode: _FixMode, unsafe_fixes: bool,
               timeout: float | None, ignore_noqa: bool = False) -> tuple[int, bytes]:
    """Fix the source read from stdin: ``--fix`` prints the fixed source on stdout (a notebook's
    JSON with its cells fixed) and returns the count and the fixed bytes; ``--diff`` prints the
    fixes as a diff and what it would fix, and exits (1 when a fix is pending)."""
    from accumlint.run import apply_fixes as fixes

    result = fixes.fix_bounded(path, data, codes, unsafe=unsafe_fixes, timeout=timeout, ignore_noqa=ignore_noqa)
    if result.error:
        click.echo(f"error: {result.error}", err=True)
    if mode.diff:
        click.echo(result.diff(), nl=False)
        for line in fixes.fix_summary([result], diff=True):
            click.echo(line, err=True)
        sys.exit(EXIT_FINDINGS if result.changed and not result.error else EXIT_OK)
    for line in result.not_applied:  # stdout holds the source: why a fix was left out goes to stderr
        click.echo(f"note: {line}", err=True)
    data = result.fixed
    fixed = sum(result.applied.values())
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return fixed, data


def _text_or_json(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--output-format text|json`` of the commands that print one document."""
    return click.option("--output-format", type=click.Choice(("text", "json")), default="text",
                        show_default=True, help=help_text)


@main.command(short_help="Print a rule's catalogue page, or list all rules.")
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule: code, name, severity, default.")
@_text_or_json("text: the rule page (a table with --all); json: the rule's metadata and page.")
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
    hint = catalogue.noqa_hint(info)
    if hint:
        click.echo(f"\n{hint.rstrip()}")


@main.command(short_help="Show what the simulator makes of a file's training loops.")
@click.argument("target", metavar="FILE[:LINE]")
@_text_or_json("text: one block per loop; json: the same as data.")
def explain(target: str, output_format: str) -> None:
    """Simulate the training loops of FILE (the one holding LINE when given) with A = 1, 2 and 4,
    and print per run the events microbatch by microbatch, the roles and where A comes from,
    and why a loop is undecided."""
    from accumlint.commands import explain as explaining

    parsed = explaining.Target.parse(target)
    try:
        results = explaining.explain(parsed)
    except explaining.ExplainError as exc:
        _fail(str(exc))
        return
    if output_format == "json":
        click.echo(json.dumps(explaining.to_json(parsed.path, results), indent=2))
    else:
        click.echo(explaining.render_text(parsed.path, results).rstrip("\n"))


@main.command(short_help="Run the language server (for editors).")
def server() -> None:
    """Run the language server on stdin/stdout (for editors; needs the `lsp` extra)."""
    try:
        from accumlint.lsp.server import serve
    except ImportError as exc:
        _fail(f"the language server needs pygls: pip install 'pygls>=2,<3' (in a clone: pip install '.[lsp]') ({exc})")
        return
    serve()


@main.command(short_help="Remove this project's cache (only what accumlint wrote).")
@_config_option
@_cache_dir_option
def clean(config_path: str | None, cache_dir: str | None) -> None:
    """Remove the cache of the project in the current directory: only the files accumlint wrote,
    then its directory if that left it empty."""
    try:
        settings = config.discover_settings(["."], config_path)
        location = _cache_location(settings, cache_dir)
        removed = cache_directory.clean(location, cache_directory.protected_paths(settings.project_root),
                                        cache.user_key(create=False))  # what it signed is what clean removes
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
