"""``accumlint server``: a Language Server over stdio (pygls), for editors.

* **Diagnostics** when a document is opened, changed (debounced: :data:`DEBOUNCE_S` after the
  last change) or saved: the same engine and the same configuration as ``accumlint check``
  (the nearest ``[tool.accumlint]`` above the file, its per-file ignores and excludes; a
  notebook by its suffix), for the text in the editor, saved or not.
* **Code actions** for a diagnostic: its fix (``quickfix``; preferred when safe, titled
  "(unsafe)" otherwise), and ``# noqa: CODE`` on its line (``# accumlint: noqa: CODE`` where
  the configuration's ``noqa-style`` is ``accumlint``); ``source.fixAll.accumlint`` applies
  the safe fixes of the document, as ``--fix`` would. A check computes the fixes its findings'
  rules propose; a fix is verified (the fixed text checked again) only when a code action asks
  for it, with the fixes' own time budget: never the check's ``parse-timeout``, never ``ACC000``.
* **Hover** over a diagnostic's range: the rule's summary, severity and page link.
* **Notebooks** (LSP 3.17 notebook sync, ``notebookDocument/*``): a Jupyter notebook the editor
  opens is checked as ``accumlint check`` checks its ``.ipynb`` (its code cells in order, the
  nearest configuration of the notebook's path), from the cells' text in the editor; each
  finding is published on its cell's document, at its line in the cell, with its hover and its
  quick fixes as edits of the cell (a fix verified in the notebook, as ``--fix`` verifies it). A
  code cell in another language (SQL set as the cell's language) is not checked. No fix-all and
  no loop timeline in notebooks yet.

Positions: findings count code points; LSP counts the negotiated encoding's code units (UTF-16
unless the client offers another), converted with pygls' position codec.

Bounded as ``accumlint check`` is: each check (a fix's verification, a fix-all, a loop's
hover) runs in a worker process with the run's time budget (``parse-timeout``) and memory limit
(:func:`accumlint.run.pool.run_alone`), waited for on a thread of the server's pools: the event loop
never runs an analysis, so it goes on answering. Each document has at most one check in flight:
a change (``didChange``), a save or a close kills the worker of its previous one, whose result
is never published, and a document's check never waits for another document's. A request's
work is killed when the client cancels it (``$/cancelRequest``: ``RequestCancelled``) or the
document changes meanwhile (``ContentModified``); a code action or a hover asked on a version
whose check is on its way is answered once it is checked, never from an older one. The first
check in a project reports the index build as work-done progress when the client supports
it; each document's project index is kept between its checks
(:class:`accumlint.run.runner.FileIndexes`: rebuilt where the document's imports or a module it
reads changed, its imports resolved anew after a save of a new file or a file created or
deleted, which the client's file watchers report where it registers them dynamically). A file
past either limit gets ``ACC000``. A file the editor has not opened is read only through
:func:`accumlint.files.reading.read_source` (regular files, bounded), never by pygls. A request whose
parameters do not parse is answered with ``InvalidParams``; ``shutdown`` kills every worker at
once and answers without waiting for them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import sys
import threading
import tokenize
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from accumlint import __version__
from accumlint.files.reading import NotARegularFile, read_source
from accumlint.files.text_edits import TextEdit, text_edits
from accumlint.noqa.suppression import DIRECTIVE_START, NOQA_FORM
from accumlint.pipeline.run_context import RunContext
from accumlint.project import ProjectIndex
from accumlint.run import pool, runner
from accumlint.run.suggested_fixes import SuggestedFix
from accumlint.settings.config import ConfigError
from accumlint.settings.discovery import is_force_excluded
from accumlint.settings.hierarchy import Resolver
from accumlint.spec.findings import Finding, Severity

#: seconds without a change before a changed document is checked again
DEBOUNCE_S = 0.3
#: threads that wait on the checks' workers: one check per document at most, so up to this
#: many documents are checked at once (each worker bounded by :data:`accumlint.run.pool.MEMORY_LIMIT`)
CHECK_THREADS = 8
#: threads that wait on the workers of requests: a fix's verification, a fix-all, a loop's hover
REQUEST_THREADS = 4
T = TypeVar("T")
SOURCE = "accumlint"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.accumlint"
_SEVERITIES = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
#: the notebooks the server syncs: Jupyter's, with their Python cells (LSP 3.17)
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithCells(
        notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")])],
    save=True,
)
#: the cell languages checked as Python (a code cell in another language is left out)
_PYTHON_CELLS = frozenset({"python", "python3", ""})


@dataclass
class _Checked:
    """A document's last check: its text, findings and their fixes (computed by the check)."""

    version: int | None
    text: str
    findings: list[Finding]
    codes: frozenset[str]
    #: the fixes the findings' rules propose (not verified: shown as available)
    fixes: dict[Finding, SuggestedFix] | None = None
    lines: list[str] = field(default_factory=list)
    #: each proposed fix once verified for a code action: the fix as it passed, or None
    verdicts: dict[Finding, SuggestedFix | None] = field(default_factory=dict)
    #: the configuration's ``noqa-style``: the form of the "disable for this line" quick fix
    noqa_style: str = NOQA_FORM
    #: the project index the check read (None: no project): its fixes are verified in it too
    index: ProjectIndex | None = None


@dataclass(frozen=True)
class _View:
    """The editor document a code action edits: a file (``cell`` 0) or a notebook's cell
    (``cell`` N), its ``lines`` and ``text``; ``checked_document``: the document whose check it
    is (its path is what a fix is verified as: the notebook for a cell)."""

    uri: str
    document: TextDocument
    lines: list[str]
    text: str
    cell: int
    checked_document: TextDocument

    @property
    def checked_uri(self) -> str:
        return self.checked_document.uri


class _Protocol(LanguageServerProtocol):
    """pygls' protocol, except that a request whose parameters do not parse (a hover without
    ``position``) is answered with ``InvalidParams`` instead of being logged and dropped."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:  # a request: the client waits for an answer
                self._send_response(data["id"], error=exc.to_response_error())
            raise


class AccumlintServer(LanguageServer):
    """The language server; one :class:`~accumlint.settings.hierarchy.Resolver` (configuration files are
    read again when a ``pyproject.toml`` is saved)."""

    def __init__(self) -> None:
        super().__init__("accumlint", __version__, protocol_cls=_Protocol, notebook_document_sync=NOTEBOOK_SYNC)
        self.resolver = Resolver()
        self.checked: dict[str, _Checked] = {}
        self.pending: dict[str, asyncio.TimerHandle] = {}
        #: each document's changes so far (opened, changed, saved, closed): a check's result
        #: is published only if none came after the check started
        self.generation: dict[str, int] = {}
        #: the worker handle of each document's check in flight
        self.running: dict[str, pool.Cancel] = {}
        #: the worker handles of each document's requests in flight (code actions, hovers)
        self.serving: dict[str, set[pool.Cancel]] = {}
        #: the project roots whose index was built once (the first build reports progress)
        self.indexed: set[str] = set()
        #: each document's project index, kept between its checks (rebuilt where the document's
        #: imports or backward-performing names, or a module it reads, changed)
        self.indexes = runner.FileIndexes()
        #: set (and dropped) when a check of the document is stored, or it closes: what a
        #: code action on a version not checked yet waits for
        self.stored: dict[str, asyncio.Event] = {}
        self.checker = ThreadPoolExecutor(max_workers=CHECK_THREADS, thread_name_prefix="accumlint-check")
        self.requests = ThreadPoolExecutor(max_workers=REQUEST_THREADS, thread_name_prefix="accumlint-request")
        self.closing = False
        #: each open notebook's cell documents that diagnostics were last published on
        self.published_cells: dict[str, list[str]] = {}

    # --- checking ---------------------------------------------------------------

    def source(self, uri: str) -> tuple[int | None, str, bytes] | None:
        """The version, text and bytes to check of ``uri``: the editor's text of an open
        document, else the file's bytes read bounded (:func:`read_source`; a FIFO, a device, a
        directory or an unreadable file: None, not checked)."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            text = _notebook_json(notebook, self.workspace.text_documents)
            return notebook.version, text, text.encode("utf-8")
        document = self.workspace.text_documents.get(unquote(uri))
        if document is not None:
            text = document.source  # a lone surrogate from the client: undecodable bytes, ACC000
            return document.version, text, text.encode("utf-8", errors="surrogatepass")
        path = _fs_path(uri)
        if path is None:
            return None
        try:
            data, _ = read_source(path)  # past the size limit: a prefix, which the check calls too large
        except (OSError, NotARegularFile) as exc:
            logging.getLogger(__name__).info("accumlint: %s not checked: %s", uri, exc)
            return None
        return None, data.decode("utf-8", errors="replace"), data

    def check_document(
        self, uri: str, version: int | None, text: str, data: bytes
    ) -> tuple[list[types.Diagnostic], str | None]:
        """:meth:`check_text`, and remember the check; the diagnostics to publish, and the
        configuration error that kept it from being checked (if any). Blocks."""
        checked, error = self.check_text(uri, version, text, data)
        self.checked[uri] = checked
        return self.diagnostics(uri, checked), error

    def check_text(
        self, uri: str, version: int | None, text: str, data: bytes,
        index_progress: Callable[[str], Callable[[], None]] | None = None,
    ) -> tuple[_Checked, str | None]:
        """Check ``data`` (``text`` decoded) as the document ``uri`` in a bounded worker
        (:func:`runner.check_one`: ``ACC000`` past the time or memory limit), with the fixes
        of its findings; the check, and the configuration error that kept it from being
        checked (if any). ``index_progress(root)``: called before the first index build of a
        project root, it returns what to call once it is built. Blocks: run it on
        :attr:`checker`, under the document's :class:`pool.Cancel` (then: raises
        :class:`pool.Cancelled` when it is cancelled)."""
        path = _fs_path(uri)
        path = path or os.path.join(os.getcwd(), "untitled.ipynb" if self._is_notebook(uri) else "untitled.py")
        codes: frozenset[str] = frozenset()
        findings: list[Finding] = []
        fixes: dict[Finding, SuggestedFix] = {}
        error = None
        noqa_style = NOQA_FORM
        index = None
        try:
            settings = self.resolver.settings_for(path)
            noqa_style = settings.noqa_style
            excludes = [*settings.exclude, *settings.extend_exclude]
            if not self.closing and not is_force_excluded(path, excludes, settings.project_root):
                codes = self.resolver.codes_for(path)
                root = str(settings.project_root)
                done = index_progress(root) if index_progress is not None and root not in self.indexed else None
                try:
                    index = self.indexes.index(path, data, root)
                finally:
                    self.indexed.add(root)
                    if done is not None:
                        done()
                result = runner.check_one(path, data, codes, root, suggest=True,
                                          timeout=settings.parse_timeout or None, index=index)
                findings, fixes = result.findings, result.fixes or {}
        except ConfigError as exc:
            error = f"accumlint: {exc}"
        checked = _Checked(version, text, findings, codes, fixes, lines=_LINE.findall(text), noqa_style=noqa_style,
                           index=index)
        return checked, error

    def diagnostics(self, uri: str, checked: _Checked) -> list[types.Diagnostic]:
        """The diagnostics of a check of ``uri`` (a notebook's findings in cells: none)."""
        document = self._document(uri, checked)
        return [self._diagnostic(document, checked.lines, f) for f in checked.findings if not f.cell]

    def invalidate(self, uri: str) -> int:
        """A change of ``uri``: its debounced check and its work in flight are cancelled (their
        workers killed); the document's new generation."""
        self.generation[uri] = generation = self.generation.get(uri, 0) + 1
        if (handle := self.pending.pop(uri, None)) is not None:
            handle.cancel()
        if (running := self.running.pop(uri, None)) is not None:
            running.cancel()
        for work in self.serving.pop(uri, set()):
            work.cancel()
        return generation

    async def publish(self, uri: str) -> None:
        """Check ``uri`` (cancelling its check in flight) on :attr:`checker` while the event loop
        goes on answering, and publish its diagnostics unless the document changed meanwhile."""
        if self.closing:
            return
        generation = self.invalidate(uri)
        try:
            await self._publish(uri, generation)
        finally:  # stored, stale or not checked: the requests waiting for it look again
            self.wake(uri)

    async def _publish(self, uri: str, generation: int) -> None:
        source = self.source(uri)
        if source is None:
            return
        version, text, data = source
        work = self.running[uri] = pool.Cancel()
        loop = asyncio.get_running_loop()
        progress = functools.partial(self._index_progress, loop) if self._supports_progress() else None
        try:
            checked, error = await loop.run_in_executor(
                self.checker, _under, work, self.check_text, uri, version, text, data, progress)
        except (RuntimeError, pool.Cancelled):  # shut down meanwhile, or a newer version is on its way
            return
        finally:
            if self.running.get(uri) is work:
                del self.running[uri]
        if self.closing or self.generation.get(uri) != generation:
            return  # stale: the document changed (or closed) while it was checked
        self.checked[uri] = checked
        if error is not None:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, error))
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            self.publish_cells(uri, notebook, checked)
            return
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=self.diagnostics(uri, checked))
        )

    def cell_diagnostics(self, notebook: types.NotebookDocument,
                         checked: _Checked) -> dict[str, list[types.Diagnostic]]:
        """The diagnostics of a check of ``notebook``, by cell document URI (every cell, most with
        none): a finding of cell N (counting every cell, as ``accumlint check`` does) at its line
        in that cell; one of the whole notebook (``ACC000`` for a notebook that cannot be read) on
        its first code cell."""
        cells = [cell.document for cell in notebook.cells]
        by_cell: dict[str, list[types.Diagnostic]] = {uri: [] for uri in cells}
        first_code = next((cell.document for cell in notebook.cells if cell.kind == types.NotebookCellKind.Code),
                          cells[0] if cells else None)
        for finding in checked.findings:
            uri = cells[finding.cell - 1] if 1 <= finding.cell <= len(cells) else first_code
            if uri is None:
                continue
            document = self.workspace.text_documents.get(unquote(uri)) or TextDocument(uri, source="")
            by_cell[uri].append(self._diagnostic(document, _LINE.findall(document.source), finding))
        return by_cell

    def publish_cells(self, uri: str, notebook: types.NotebookDocument, checked: _Checked) -> None:
        """Publish the diagnostics of ``notebook`` (``uri``) on its cells, and clear them on the
        cells published before that the notebook no longer has."""
        by_cell = self.cell_diagnostics(notebook, checked)
        for gone in self.published_cells.get(uri, []):
            by_cell.setdefault(gone, [])
        self.published_cells[uri] = [cell for cell, found in by_cell.items() if found]
        for cell, diagnostics in by_cell.items():
            document = self.workspace.text_documents.get(unquote(cell))
            version = document.version if document is not None else None
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=cell, version=version, diagnostics=diagnostics))

    def close_notebook(self, uri: str) -> None:
        """``uri`` closed: its check stops and its cells' diagnostics are cleared."""
        if (path := _fs_path(uri)) is not None:
            self.indexes.forget(path)
        self.invalidate(uri)
        self.checked.pop(uri, None)
        self.wake(uri)
        for cell in self.published_cells.pop(uri, []):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell, diagnostics=[]))

    def wake(self, uri: str) -> None:
        """Wake the requests waiting for a check of ``uri`` (:meth:`checked_at`)."""
        if (event := self.stored.pop(uri, None)) is not None:
            event.set()

    async def checked_at(self, uri: str, version: int | None) -> _Checked | None:
        """The check of ``uri`` at ``version`` (the editor's current one), waiting for it while
        it is on its way (debounced or running); None where there is none, or the document
        closed; ``ContentModified`` where it changed again before that version was checked."""
        while not self.closing:
            checked = self.checked.get(uri)
            if checked is not None and (checked.version is None or checked.version == version):
                return checked
            coming = uri in self.pending or uri in self.running
            if checked is None and not coming:
                return None
            past = checked is not None and version is not None and checked.version > version
            if not coming or version is None or past:
                raise JsonRpcContentModified(f"{uri} changed while the request was answered")
            await self.stored.setdefault(uri, asyncio.Event()).wait()
        return None

    def schedule(self, uri: str) -> None:
        """A change of ``uri``: cancel its work in flight, check it once :data:`DEBOUNCE_S`
        passed without another change."""
        self.invalidate(uri)
        loop = asyncio.get_running_loop()
        self.pending[uri] = loop.call_later(DEBOUNCE_S, self.start, uri)

    def start(self, uri: str) -> None:
        """Check ``uri`` and publish (:meth:`publish`) without waiting for it."""
        self.pending.pop(uri, None)
        asyncio.ensure_future(self.publish(uri))

    def close(self) -> None:
        """Stop checking: no debounced check starts, and the workers of every check and
        request in progress are killed (their threads end at once)."""
        self.closing = True
        for handle in self.pending.values():
            handle.cancel()
        self.pending.clear()
        for uri in list(self.stored):
            self.wake(uri)
        pool.end_alone()
        for executor in (self.checker, self.requests):
            executor.shutdown(wait=False, cancel_futures=True)

    # --- the project's modules ------------------------------------------------------

    async def watch_modules(self) -> None:
        """Ask the client to report the Python files created or deleted in the workspace, where
        it registers file watchers dynamically: a new module may be what an import of a kept
        project index (:attr:`indexes`) now resolves to, a deleted one what it no longer does.
        (A module's new content needs no report: each check compares what it was built from.)"""
        try:
            workspace = self.client_capabilities.workspace
        except AttributeError:  # not initialized (a server driven directly)
            return
        watched = workspace.did_change_watched_files if workspace is not None else None
        if watched is None or not watched.dynamic_registration:
            return
        watcher = types.FileSystemWatcher(glob_pattern="**/*.py", kind=types.WatchKind.Create | types.WatchKind.Delete)
        registration = types.Registration(
            id=f"accumlint-modules-{uuid.uuid4()}", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=[watcher]))
        try:
            await self.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
        except Exception as exc:  # noqa: BLE001 - refused: a new module is then seen at the next save
            logging.getLogger(__name__).info("accumlint: no file watchers: %s", exc)

    def modules_changed(self, changes: list[types.FileEvent]) -> None:
        """Files the client saw created or deleted: the kept indexes resolve their imports anew
        at their next check (the facts of the modules are kept)."""
        if any(change.type != types.FileChangeType.Changed for change in changes):
            self.indexes.forget()

    # --- progress ---------------------------------------------------------------

    def _supports_progress(self) -> bool:
        try:
            window = self.client_capabilities.window
        except AttributeError:  # not initialized (a server driven directly)
            return False
        return bool(window is not None and window.work_done_progress)

    def _index_progress(self, loop: asyncio.AbstractEventLoop, root: str) -> Callable[[], None]:
        """Begin the client's progress of the index build of ``root`` (called on a checker
        thread: the messages go from the server's event loop, ``loop``); what ends it."""
        begun = asyncio.run_coroutine_threadsafe(self._begin_progress(root), loop)

        def end() -> None:
            asyncio.run_coroutine_threadsafe(self._end_progress(begun), loop)

        return end

    async def _begin_progress(self, root: str) -> str | None:
        token = f"accumlint-index-{uuid.uuid4()}"
        try:
            await self.work_done_progress.create_async(token)
        except Exception:  # noqa: BLE001 - the client refused the token: no progress shown
            return None
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title="accumlint: indexing the project", message=root, cancellable=False))
        return token

    async def _end_progress(self, begun: Future[str | None]) -> None:
        token = await asyncio.wrap_future(begun)
        if token is not None:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message="indexed"))

    # --- requests' work ---------------------------------------------------------

    async def serve(self, uri: str, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` on :attr:`requests` under a :class:`pool.Cancel` of its own (its
        workers killed when the request is cancelled or ``uri`` changes). Raises
        ``CancelledError`` where the client cancelled the request, ``ContentModified`` where
        ``uri`` changed, ``RuntimeError`` where the server shut down."""
        work = pool.Cancel()
        self.serving.setdefault(uri, set()).add(work)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.requests, _under, work, function, *args)
        except asyncio.CancelledError:  # $/cancelRequest (or shutdown): end its worker too
            work.cancel()
            raise
        except pool.Cancelled:
            raise JsonRpcContentModified(f"{uri} changed while the request was answered") from None
        finally:
            self.serving.get(uri, set()).discard(work)

    def verified_fixes(self, document: TextDocument, checked: _Checked,
                       findings: list[Finding]) -> dict[Finding, SuggestedFix]:
        """The fixes of ``findings`` (of ``checked``) that pass the test ``--fix`` applies
        (:func:`runner.verify_one`, in a bounded worker with the fixes' own time budget, never the
        check's), each verified once per check of the document. Blocks: run it with :meth:`serve`."""
        from accumlint.run.apply_fixes import fixing_budget

        proposed = {f: checked.fixes[f] for f in findings if checked.fixes and f in checked.fixes
                    and f not in checked.verdicts}
        if proposed and not self.closing:
            path = document.path or os.path.join(os.getcwd(), "untitled.py")
            settings = self.resolver.settings_for(path)
            timeout = settings.parse_timeout or None
            budget = None if timeout is None else fixing_budget(timeout, proposed)
            kept = runner.verify_one(path, checked.text.encode("utf-8"), checked.codes, proposed, checked.findings,
                                     str(settings.project_root), timeout=budget, index=checked.index)
            checked.verdicts.update({finding: kept.get(finding) for finding in proposed})
        return {f: fix for f in findings if (fix := checked.verdicts.get(f)) is not None}

    def _is_notebook(self, uri: str) -> bool:
        """Whether ``uri`` is a notebook the editor synced (``notebookDocument/didOpen``)."""
        try:
            return self.workspace.get_notebook_document(notebook_uri=uri) is not None
        except RuntimeError:  # no session (a check called directly)
            return False

    def _document(self, uri: str, checked: _Checked) -> TextDocument:
        """The open document ``uri``, else one holding the text last checked (pygls would read the file)."""
        try:
            document = self.workspace.text_documents.get(unquote(uri))
        except RuntimeError:  # no session (a check called directly)
            document = None
        return document or TextDocument(uri, source=checked.text)

    # --- positions --------------------------------------------------------------

    def _position(self, document: TextDocument, lines: list[str], row: int, column: int) -> types.Position:
        """A 1-based (row, code-point column) as an LSP position in the client's code units."""
        if row > len(lines):
            return types.Position(line=row - 1, character=0)
        prefix = lines[row - 1][: column - 1]
        return types.Position(line=row - 1, character=document.position_codec.client_num_units(prefix))

    def _range(self, document: TextDocument, lines: list[str], finding: Finding) -> types.Range:
        start = self._position(document, lines, finding.line, finding.column)
        if finding.end_line:
            end = self._position(document, lines, finding.end_line, max(finding.end_column, 1))
        else:
            end = types.Position(line=start.line, character=start.character + 1)
        return types.Range(start=start, end=end)

    def _diagnostic(self, document: TextDocument, lines: list[str], finding: Finding) -> types.Diagnostic:
        return types.Diagnostic(
            range=self._range(document, lines, finding),
            message=finding.message,
            severity=_SEVERITIES[finding.severity],
            code=finding.code,
            code_description=types.CodeDescription(href=finding.url) if finding.url else None,
            source=SOURCE,
            data={"name": finding.name},
        )

    def text_edits(self, document: TextDocument, lines: list[str], edits: list[TextEdit]) -> list[types.TextEdit]:
        """Our edits (1-based code points of ``document``, whose ``lines`` they are) as LSP text edits."""
        return [
            types.TextEdit(
                range=types.Range(
                    start=self._position(document, lines, *edit.location),
                    end=self._position(document, lines, *edit.end_location),
                ),
                new_text=edit.content,
            )
            for edit in edits
        ]

    # --- features ---------------------------------------------------------------

    async def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        """The fixes and ``noqa`` quick-fixes of the findings whose ranges meet the requested
        one (only their fixes are verified), and the fix-all only when its kind is asked for.
        On a version of the document whose check is on its way: answered once it is checked
        (``ContentModified`` where the document changes again first)."""
        uri = params.text_document.uri
        notebook = self._notebook_of_cell(uri)
        if notebook is not None:  # a cell: the notebook's check, the findings of this cell
            checked = await self.checked_at(notebook.uri, notebook.version)
            document = self.workspace.text_documents.get(unquote(uri))
            cell = _cell_number(notebook, uri)
            if checked is None or document is None or not cell:  # closed, or the cell removed meanwhile
                return []
            view = _View(uri, document, _LINE.findall(document.source), document.source, cell,
                         TextDocument(notebook.uri, source=checked.text))
        else:
            document = self.workspace.text_documents.get(unquote(uri))
            checked = await self.checked_at(uri, document.version if document is not None else None)
            if checked is None:
                return []
            document = self._document(uri, checked)
            view = _View(uri, document, checked.lines, checked.text, 0, document)
        wanted = params.context.only
        actions: list[types.CodeAction] = []
        if wanted is None or any(kind.startswith(types.CodeActionKind.QuickFix) for kind in wanted):
            meeting = [finding for finding in checked.findings if finding.cell == view.cell
                       and _overlaps(self._range(view.document, view.lines, finding), params.range)]
            try:
                fixes = await self.serve(view.checked_uri, self.verified_fixes, view.checked_document, checked,
                                         meeting) if meeting else {}
            except RuntimeError:  # shut down meanwhile
                fixes = {}
            for finding in meeting:
                diagnostic = self._diagnostic(view.document, view.lines, finding)
                fix = fixes.get(finding)
                if fix is not None:
                    title = f"Fix {finding.code}: {fix.message}" + ("" if fix.safe else " (unsafe)")
                    actions.append(
                        self._action(title, types.CodeActionKind.QuickFix, view, list(fix.edits), diagnostic,
                                     preferred=fix.safe)
                    )
                noqa = self._noqa_edits(view.text, checked.noqa_style, finding)
                if noqa:
                    form = DIRECTIVE_START[checked.noqa_style]
                    actions.append(self._action(f"Disable {finding.code} for this line ({form})",
                                                types.CodeActionKind.QuickFix, view, noqa, diagnostic))
        if wanted is not None and not view.cell and any(FIX_ALL_KIND.startswith(kind) for kind in wanted):
            try:
                edits = await self.serve(uri, self._fix_all, document, checked)
            except RuntimeError:  # shut down meanwhile
                edits = []
            if edits:
                actions.append(self._action("Fix all safe accumlint findings", FIX_ALL_KIND, view, edits))
        return actions

    def _notebook_of_cell(self, uri: str) -> types.NotebookDocument | None:
        """The synced notebook whose cell ``uri`` is (None: not a cell)."""
        try:
            return self.workspace.get_notebook_document(cell_uri=uri)
        except RuntimeError:  # no session (called directly)
            return None

    def _action(
        self,
        title: str,
        kind: str,
        view: _View,
        edits: list[TextEdit],
        diagnostic: types.Diagnostic | None = None,
        *,
        preferred: bool = False,
    ) -> types.CodeAction:
        change = types.WorkspaceEdit(changes={view.uri: self.text_edits(view.document, view.lines, edits)})
        return types.CodeAction(
            title=title,
            kind=kind,
            diagnostics=[diagnostic] if diagnostic else None,
            edit=change,
            is_preferred=preferred or None,
        )

    def _noqa_edits(self, text: str, noqa_style: str, finding: Finding) -> list[TextEdit]:
        """The edits of ``text`` that add ``finding``'s code to a directive on its line (in the
        ``noqa_style`` form); none for a code that cannot be suppressed or a text that does not
        tokenize."""
        from accumlint.commands.add_noqa import add_noqa_text
        from accumlint.noqa.suppression import UNSUPPRESSIBLE

        if finding.code in UNSUPPRESSIBLE:
            return []
        try:
            new_text, changed = add_noqa_text(text, {finding.line: {finding.code}}, noqa_style)
        except (SyntaxError, ValueError, tokenize.TokenError):  # a text that does not tokenize: no action
            return []
        return text_edits(text, new_text) if changed else []

    def _fix_all(self, document: TextDocument, checked: _Checked) -> list[TextEdit]:
        """The safe fixes of the whole document, as ``--fix`` applies them (one edit set), computed
        in a bounded worker as a check is (none past its time or memory limit), in the project
        index the check read. Blocks: run it with :meth:`serve`."""
        from accumlint.run.apply_fixes import _fix_one, fixing_budget

        path = document.path or os.path.join(os.getcwd(), "untitled.py")
        timeout = self.resolver.settings_for(path).parse_timeout or None
        budget = None if timeout is None else fixing_budget(timeout, checked.findings)
        try:
            result = pool.run_alone(_fix_one, path, checked.text.encode("utf-8"), checked.codes, False, timeout=budget,
                                    context=RunContext(checked.index))
        except (pool.TooSlow, pool.OutOfMemory, BrokenProcessPool, ConfigError):
            return []
        if not result.changed:
            return []
        return text_edits(checked.text, result.fixed.decode("utf-8"))

    async def hover(self, params: types.HoverParams) -> types.Hover | None:
        """The rule of the finding under the cursor: code, name, severity, summary, page link;
        on the first line of a training loop without one, the simulator's timeline of it
        (computed in a bounded worker, off the event loop). Read from the check of the editor's
        version of the document: while that check is on its way (debounced or running), the
        hover waits for it rather than answer from an older text (``ContentModified`` where the
        document changes again first, as :meth:`checked_at`)."""
        uri = params.text_document.uri
        notebook = self._notebook_of_cell(uri)
        if notebook is not None:
            return await self._cell_hover(params, notebook)
        document = self.workspace.text_documents.get(unquote(uri))
        checked = await self.checked_at(uri, document.version if document is not None else None)
        if checked is None:
            return None
        found = self._finding_hover(params, checked)
        if found is not None:
            return found
        path = _fs_path(uri)
        if path is None or path.endswith(".ipynb"):
            return None
        try:
            markdown = await self.serve(uri, self._loop_hover, path, params.position.line + 1, checked)
        except RuntimeError:  # shut down meanwhile
            return None
        if markdown is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown))

    def _loop_hover(self, path: str, line: int, checked: _Checked) -> str | None:
        """The timeline (Markdown) of the loop that starts on ``line`` (1-based) of the text
        checked, None where none starts there, the text does not parse or the worker ran past
        the check's limits. Blocks: run it with :meth:`serve`."""
        try:
            settings = self.resolver.settings_for(path)
            return pool.run_alone(_loop_markdown, path, checked.text.encode("utf-8", errors="surrogatepass"), line,
                                  str(settings.project_root), timeout=settings.parse_timeout or None)
        except (pool.TooSlow, pool.OutOfMemory, BrokenProcessPool, ConfigError):
            return None

    async def _cell_hover(self, params: types.HoverParams, notebook: types.NotebookDocument) -> types.Hover | None:
        """The rule of the finding under the cursor in a cell of ``notebook`` (the check of its
        editor's version, waited for as :meth:`hover` waits)."""
        uri = params.text_document.uri
        checked = await self.checked_at(notebook.uri, notebook.version)
        document = self.workspace.text_documents.get(unquote(uri))
        cell = _cell_number(notebook, uri)
        if document is None or checked is None or not cell:  # closed, or the cell removed meanwhile
            return None
        return self._finding_hover(params, checked, document, _LINE.findall(document.source), cell)

    def _finding_hover(self, params: types.HoverParams, checked: _Checked, document: TextDocument | None = None,
                       lines: list[str] | None = None, cell: int = 0) -> types.Hover | None:
        """The hover of the finding of ``checked`` under the cursor: in ``document`` (default: the
        checked one) whose ``lines`` hold cell ``cell`` of a notebook (0: a file's findings)."""
        document = document or self._document(params.text_document.uri, checked)
        lines = checked.lines if lines is None else lines
        for finding in checked.findings:
            if finding.cell != cell:
                continue
            found = self._range(document, lines, finding)
            if not _contains(found, params.position):
                continue
            return types.Hover(
                contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=_hover_text(finding)),
                range=found,
            )
        return None


def _fs_path(uri: str) -> str | None:
    """The file system path of a ``file:`` URI (None: another scheme, an untitled buffer)."""
    return to_fs_path(uri) if uri.startswith("file:") else None


def _cell_number(notebook: types.NotebookDocument, uri: str) -> int:
    """The 1-based number of cell ``uri`` among all of ``notebook``'s cells (0: not one of them)."""
    return next((n for n, cell in enumerate(notebook.cells, start=1) if unquote(cell.document) == unquote(uri)), 0)


def _notebook_json(notebook: types.NotebookDocument, documents: dict[str, TextDocument]) -> str:
    """The ``.ipynb`` text (nbformat 4) of ``notebook`` as the editor holds it: every cell in order
    (so cell N is the editor's cell N), a code cell with its text as a code cell when its language
    is Python, as a raw cell otherwise (not checked); markdown cells as markdown."""
    cells = []
    for cell in notebook.cells:
        document = documents.get(unquote(cell.document))
        source = document.source if document is not None else ""
        language = (document.language_id or "") if document is not None else ""
        if cell.kind == types.NotebookCellKind.Code and language in _PYTHON_CELLS:
            cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                          "source": source})
        else:
            kind = "markdown" if cell.kind == types.NotebookCellKind.Markup else "raw"
            cells.append({"cell_type": kind, "metadata": {}, "source": source})
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def _under(work: pool.Cancel, function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` with ``work`` the handle of the workers it starts (on a pool's thread)."""
    _load_analysis()
    with work.applies():
        return function(*args)


_loading = threading.Lock()
_loaded = False


def _load_analysis() -> None:
    """Import the modules the server's threads use, once, on one thread: two threads importing
    them first at once could each see a module the other is still initializing (their imports
    are circular) and fail with ``ImportError``."""
    global _loaded
    if _loaded:
        return
    with _loading:
        if not _loaded:
            import accumlint.pipeline.engine
            import accumlint.pipeline.notebook
            import accumlint.run.apply_fixes  # noqa: F401 - all three imported for their effect

            _loaded = True


def _loop_markdown(path: str, data: bytes, line: int, project_root: str) -> str | None:
    """In a worker: the simulator's timeline (Markdown) of the loop of ``data`` that starts on
    ``line`` (1-based), None where none does or the text does not parse."""
    from accumlint.commands import explain

    try:
        results = explain.explain_source(path, data, line, project_root, exact=True)
    except explain.ExplainError:
        return None
    return explain.render_markdown(results[0]) if results else None


def _hover_text(finding: Finding) -> str:
    from accumlint.report import catalogue

    info = catalogue.rule_info(finding.code)
    summary = info.summary if info is not None else finding.message
    lines = [f"**{finding.code}** `{finding.name}` ({finding.severity.value})", "", summary]
    if finding.fix:
        lines += ["", f"Fix: {finding.fix}"]
    if finding.url:
        lines += ["", f"[Rule page]({finding.url})"]
    return "\n".join(lines)


def _before(a: types.Position, b: types.Position) -> bool:
    return (a.line, a.character) < (b.line, b.character)


def _overlaps(a: types.Range, b: types.Range) -> bool:
    return not (_before(a.end, b.start) or _before(b.end, a.start))


def _contains(r: types.Range, p: types.Position) -> bool:
    return not _before(p, r.start) and not _before(r.end, p)


def create_server() -> AccumlintServer:
    """A server with its features registered (not started)."""
    server = AccumlintServer()

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AccumlintServer, params: types.InitializedParams) -> None:
        await ls.watch_modules()

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: AccumlintServer, params: types.DidChangeWatchedFilesParams) -> None:
        ls.modules_changed(params.changes)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: AccumlintServer, params: types.DidOpenTextDocumentParams) -> None:
        await ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AccumlintServer, params: types.DidChangeTextDocumentParams) -> None:
        if unquote(params.text_document.uri) in ls.workspace.text_documents:  # else: no text to check
            ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: AccumlintServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri.endswith("/pyproject.toml"):  # the configuration changed: read it again, check every document
            ls.resolver = Resolver()
            ls.indexed.clear()
            ls.indexes = runner.FileIndexes()  # the roots may have moved
            for open_uri in list(ls.checked):
                ls.start(open_uri)
            return
        if (path := _fs_path(uri)) is not None:  # maybe a new module, which an import now resolves to
            ls.indexes.saved(path)
        await ls.publish(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AccumlintServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if (path := _fs_path(uri)) is not None:
            ls.indexes.forget(path)
        ls.invalidate(uri)
        ls.checked.pop(uri, None)
        ls.wake(uri)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    async def notebook_did_open(ls: AccumlintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        await ls.publish(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: AccumlintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    async def notebook_did_save(ls: AccumlintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        await ls.publish(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: AccumlintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.close_notebook(params.notebook_document.uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    async def code_action(ls: AccumlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await ls.code_actions(params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: AccumlintServer, params: types.HoverParams) -> types.Hover | None:
        return await ls.hover(params)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: AccumlintServer, params: None) -> None:
        ls.close()

    @server.feature(types.EXIT)
    def exit_(ls: AccumlintServer, params: None) -> None:
        ls.close()

    return server


def serve() -> None:
    """Run the server on stdin/stdout until the client ends it."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # the protocol alone reads and writes them: a worker forked while the reader thread waits on
    # stdin would hang closing ``sys.stdin`` (multiprocessing does at a process's start), whose
    # lock that thread holds; a stray print would corrupt the protocol
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - for the process's life
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    create_server().start_io(stdin, stdout)


__all__ = ["DEBOUNCE_S", "AccumlintServer", "create_server", "serve"]
