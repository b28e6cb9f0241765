"""``accumlint server``: the language server driven by a real LSP client (pygls' ``LanguageClient``)
over stdio, as an editor would: initialize, open a buggy training loop, receive ACC001 at the
flagged call's range, apply its code action, receive no diagnostic; the ``noqa`` quick-fix,
hover, a debounced change and the nearest configuration."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs pygls (pip install -e '.[dev]')")

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from accumlint.files.text_edits import TextEdit, apply_edits  # noqa: E402
from tests.report.test_fixes import UNVERIFIED_FIX  # noqa: E402
from tests.shared_data import DATA, REPO  # noqa: E402

BAD = """\
for i, batch in enumerate(loader):
    loss = model(batch).mean() / 4
    optimizer.zero_grad()
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
"""
FIXED = """\
for i, batch in enumerate(loader):
    loss = model(batch).mean() / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""
TIMEOUT = 60
#: ACC101: its fix is unsafe (a logged loss changes)
UNSAFE_EXAMPLE = REPO / "rules" / "ACC101-double-normalization" / "bad_accelerate_backward_divided.py"


class Session:
    """A client talking to ``accumlint server`` in a subprocess; collects published diagnostics."""

    def __init__(self) -> None:
        self.client = LanguageClient("test-client", "1")
        self.published: dict[str, list[list[types.Diagnostic]]] = {}
        self.versions: dict[str, list[int | None]] = {}  #: the document version of each publication
        self.progress: list[tuple[str, object]] = []  #: (method or token, value) of the progress messages
        self.arrived = asyncio.Event()
        self.registrations: list[str] = []  #: the methods the server registered dynamically

        @self.client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def on_register(params: types.RegistrationParams) -> None:
            self.registrations.extend(registration.method for registration in params.registrations)

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            self.published.setdefault(params.uri, []).append(params.diagnostics)
            self.versions.setdefault(params.uri, []).append(params.version)
            self.arrived.set()

        @self.client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def on_create(params: types.WorkDoneProgressCreateParams) -> None:
            self.progress.append(("create", params.token))

        @self.client.feature(types.PROGRESS)
        def on_progress(params: types.ProgressParams) -> None:
            self.progress.append((str(params.token), params.value))

    async def start(self, root: Path, *server: str, progress: bool = False,
                    notebooks: bool = False, watchers: bool = False) -> types.InitializeResult:
        """Start ``python -m <server>`` (default: ``accumlint server``) in ``root``; ``progress``:
        the client supports work-done progress, ``notebooks``: notebook sync (LSP 3.17),
        ``watchers``: file watchers registered dynamically (then ``initialized`` is sent too)."""
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's server, not an installed one
        await self.client.start_io(sys.executable, "-m", *(server or ("accumlint", "server")), cwd=str(root), env=env)
        window = types.WindowClientCapabilities(work_done_progress=True) if progress else None
        notebook = types.NotebookDocumentClientCapabilities(
            synchronization=types.NotebookDocumentSyncClientCapabilities()) if notebooks else None
        workspace = types.WorkspaceClientCapabilities(
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
        ) if watchers else None
        result = await asyncio.wait_for(
            self.client.initialize_async(
                types.InitializeParams(
                    capabilities=types.ClientCapabilities(window=window, notebook_document=notebook,
                                                          workspace=workspace),
                    root_uri=root.as_uri(), process_id=None,
                )
            ),
            TIMEOUT,
        )
        if watchers:
            self.client.initialized(types.InitializedParams())
        return result

    async def next_diagnostics(self, uri: str, count: int) -> list[types.Diagnostic]:
        """Wait until ``uri`` has had ``count`` publications; the last one."""
        while len(self.published.get(uri, [])) < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), TIMEOUT)
        return list(self.published[uri][count - 1])

    def kill(self) -> None:
        """End the server process if it still runs (a test that failed must not leave it behind)."""
        server = self.client._server  # type: ignore[attr-defined]
        if server is not None and server.returncode is None:
            server.kill()

    async def stop(self) -> None:
        await asyncio.wait_for(self.client.shutdown_async(None), TIMEOUT)
        self.client.exit(None)
        await asyncio.wait_for(self.client.stop(), TIMEOUT)


def _open(session: Session, path: Path, text: str, version: int = 1) -> str:
    uri = path.as_uri()
    session.client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        )
    )
    return uri


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    """The client's side of a workspace edit (ASCII text: UTF-16 units are code points)."""
    ours = [
        TextEdit(
            (e.range.start.line + 1, e.range.start.character + 1),
            (e.range.end.line + 1, e.range.end.character + 1),
            e.new_text,
        )
        for e in edits
    ]
    return apply_edits(text, ours)


async def _code_actions(session: Session, uri: str, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    result = await asyncio.wait_for(
        session.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=diagnostic.range,
                context=types.CodeActionContext(diagnostics=[diagnostic]),
            )
        ),
        TIMEOUT,
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


def _run(coroutine_function, tmp_path: Path) -> None:
    asyncio.run(coroutine_function(tmp_path))


def test_diagnostic_code_action_and_clean_document(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        session = Session()
        init = await session.start(root)
        assert init.server_info is not None and init.server_info.name == "accumlint"
        try:
            uri = _open(session, root / "train.py", BAD)
            [diagnostic] = await session.next_diagnostics(uri, 1)
            assert diagnostic.code == "ACC001"
            assert diagnostic.source == "accumlint"
            assert diagnostic.severity == types.DiagnosticSeverity.Error
            # `optimizer.zero_grad()`: line 3, columns 5-26 in the CLI's 1-based terms
            assert diagnostic.range == types.Range(types.Position(2, 4), types.Position(2, 25))
            assert diagnostic.code_description is not None
            assert diagnostic.code_description.href.endswith("rules/ACC001-zero-grad-inside-group/README.md")

            actions = await _code_actions(session, uri, diagnostic)
            titles = [a.title for a in actions]
            fix = next(a for a in actions if a.title.startswith("Fix ACC001"))
            assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred
            assert "Disable ACC001 for this line (# noqa)" in titles
            assert fix.edit is not None and fix.edit.changes is not None
            fixed = _apply(BAD, fix.edit.changes[uri])
            assert fixed == FIXED

            session.client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
                )
            )
            assert await session.next_diagnostics(uri, 2) == []

            hover_uri = _open(session, root / "other.py", BAD)
            [again] = await session.next_diagnostics(hover_uri, 1)
            hover = await asyncio.wait_for(
                session.client.text_document_hover_async(
                    types.HoverParams(types.TextDocumentIdentifier(hover_uri), types.Position(2, 10))
                ),
                TIMEOUT,
            )
            assert hover is not None and isinstance(hover.contents, types.MarkupContent)
            assert hover.contents.value.startswith("**ACC001** `zero-grad-inside-group` (error)")
            assert "gradients reset every microbatch" in hover.contents.value
            assert "[Rule page](https://github.com/accumlint/accumlint/blob/main/rules/ACC001" in hover.contents.value

            noqa = next(a for a in await _code_actions(session, hover_uri, again) if "noqa" in a.title)
            assert noqa.edit is not None and noqa.edit.changes is not None
            silenced = _apply(BAD, noqa.edit.changes[hover_uri])
            assert silenced.splitlines()[2] == "    optimizer.zero_grad()  # noqa: ACC001"
            session.client.text_document_did_save(
                types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(hover_uri))
            )
            assert len(await session.next_diagnostics(hover_uri, 2)) == 1  # saved: checked again (unchanged)

            # on the loop's first line, no finding there: the simulator's timeline of the loop
            loop = await asyncio.wait_for(
                session.client.text_document_hover_async(
                    types.HoverParams(types.TextDocumentIdentifier(hover_uri), types.Position(0, 2))
                ),
                TIMEOUT,
            )
            assert loop is not None and isinstance(loop.contents, types.MarkupContent)
            assert "A: the literal 4 that sets the update's cadence" in loop.contents.value
            assert "F zero B | F zero B | F zero B | F zero B ‖ step" in loop.contents.value
            body = await asyncio.wait_for(
                session.client.text_document_hover_async(
                    types.HoverParams(types.TextDocumentIdentifier(hover_uri), types.Position(1, 2))
                ),
                TIMEOUT,
            )
            assert body is None  # a line inside the loop: nothing to show
        finally:
            await session.stop()

    _run(scenario, tmp_path)


#: ACC006 on a counter of updates: its rule proposes a fix, which fails verification (the test stays)
UNVERIFIED = UNVERIFIED_FIX.decode()  # ACC006 on a counter of updates: a proposed fix that fails verification


def test_a_code_action_offers_a_fix_only_once_verified(tmp_path: Path) -> None:
    scheduler_case = (DATA / "fix_cases" / "scheduler_each_microbatch.py").read_text(encoding="utf-8")

    async def scenario(root: Path) -> None:
        session = Session()
        await session.start(root)
        try:
            uri = _open(session, root / "trainer.py", UNVERIFIED)
            [acc006] = await session.next_diagnostics(uri, 1)
            assert acc006.code == "ACC006"
            titles = [a.title for a in await _code_actions(session, uri, acc006)]
            assert titles == ["Disable ACC006 for this line (# noqa)"]  # no fix: it failed verification

            # ACC304's fix reveals the ACC305 horizon that stepping per microbatch masked: offered unsafe
            case_uri = _open(session, root / "case_011.py", scheduler_case)
            diagnostics = await session.next_diagnostics(case_uri, 1)
            acc304 = next(d for d in diagnostics if d.code == "ACC304")
            fix = next(a for a in await _code_actions(session, case_uri, acc304) if a.title.startswith("Fix "))
            assert fix.title.endswith("(unsafe)") and not fix.is_preferred
            assert fix.edit is not None and fix.edit.changes is not None
            fixed = _apply(scheduler_case, fix.edit.changes[case_uri]).splitlines()
            at = fixed.index("                scaler.step(optimizer)")
            assert [line.strip() for line in fixed[at + 1:at + 3]] == ["if schedule is not None:", "schedule.step()"]
            assert fixed[at + 2].startswith(" " * 20)  # the guard moved with the step, under the gate
        finally:
            await session.stop()

    _run(scenario, tmp_path)


def test_changes_are_debounced_and_the_nearest_config_applies(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text('[tool.accumlint]\nignore = ["ACC001"]\n', encoding="utf-8")
    (tmp_path / "styled").mkdir()
    (tmp_path / "styled" / "pyproject.toml").write_text('[tool.accumlint]\nnoqa-style = "accumlint"\n',
                                                        encoding="utf-8")

    async def scenario(root: Path) -> None:
        session = Session()
        await session.start(root)
        try:
            ignored = _open(session, root / "sub" / "train.py", BAD)
            assert await session.next_diagnostics(ignored, 1) == []  # sub/pyproject.toml ignores ACC001
            styled = _open(session, root / "styled" / "train.py", BAD)
            [diagnostic] = await session.next_diagnostics(styled, 1)
            noqa = next(a for a in await _code_actions(session, styled, diagnostic) if "noqa" in a.title)
            assert noqa.title == "Disable ACC001 for this line (# accumlint: noqa)"
            assert noqa.edit is not None and noqa.edit.changes is not None
            silenced = _apply(BAD, noqa.edit.changes[styled])
            assert silenced.splitlines()[2] == "    optimizer.zero_grad()  # accumlint: noqa: ACC001"
            uri = _open(session, root / "train.py", FIXED)
            assert await session.next_diagnostics(uri, 1) == []
            for version, text in enumerate([BAD, FIXED, BAD], start=2):  # typed quickly: one check at the end
                session.client.text_document_did_change(
                    types.DidChangeTextDocumentParams(
                        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
                    )
                )
            [diagnostic] = await session.next_diagnostics(uri, 2)
            assert diagnostic.code == "ACC001"
            await asyncio.sleep(1.0)
            assert len(session.published[uri]) == 2  # the three changes gave one publication

            unsafe_source = UNSAFE_EXAMPLE.read_text(encoding="utf-8")
            unsafe_uri = _open(session, root / "accelerate_train.py", unsafe_source)
            [acc101] = await session.next_diagnostics(unsafe_uri, 1)
            assert acc101.code == "ACC101"
            fix = next(a for a in await _code_actions(session, unsafe_uri, acc101) if a.title.startswith("Fix "))
            assert fix.title.endswith("(unsafe)") and not fix.is_preferred
            assert fix.edit is not None and fix.edit.changes is not None
            assert _apply(unsafe_source, fix.edit.changes[unsafe_uri]) != unsafe_source
        finally:
            await session.stop()

    _run(scenario, tmp_path)


def test_positions_count_the_clients_utf16_units() -> None:
    from pygls.workspace import TextDocument

    from accumlint.lsp.server import AccumlintServer

    server = AccumlintServer()
    document = TextDocument("file:///t.py", 'x = "😀é"; f()\n')
    lines = ['x = "😀é"; f()\n']
    # code point 11 (1-based) is `f`: the emoji takes two UTF-16 units
    assert server._position(document, lines, 1, 11) == types.Position(line=0, character=11)
    assert server._position(document, lines, 2, 1) == types.Position(line=1, character=0)  # the end of the file


# --- a server that cannot be starved (issue 28, item 6) ---------------------------------------

LOOP_HEAD = "for b in loader:\n    loss.backward()\n    optimizer.step()\n"


class _PeakMemory:
    """The largest resident size (bytes) of the server or any process under it, polled from
    ``/proc`` every 20 ms while the block runs (its workers live a few seconds at most)."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid = pid
        self.peak = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _PeakMemory:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _tree(self) -> list[int]:
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        tree = [self.pid]
        for pid in tree:
            tree.extend(child for child, parent in parents.items() if parent == pid)
        return tree

    def _poll(self) -> None:
        while not self.done.wait(0.02):
            for pid in self._tree():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)


def _server_pid(session: Session) -> int:
    return session.client._server.pid  # type: ignore[attr-defined,union-attr]


async def _hover(session: Session, uri: str, seconds: float) -> types.Hover | None:
    params = types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(0, 0))
    return await asyncio.wait_for(session.client.text_document_hover_async(params), seconds)


async def _stopped_within(session: Session, seconds: float) -> float:
    """Shut the server down; the seconds its answer to ``shutdown`` took (at most ``seconds``)."""
    import time

    start = time.monotonic()
    await asyncio.wait_for(session.client.shutdown_async(None), seconds)
    took = time.monotonic() - start
    session.client.exit(None)
    await asyncio.wait_for(session.client.stop(), TIMEOUT)
    return took


def _hostile(coroutine_function, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Run ``coroutine_function(session, root)`` against a started server, killed if it failed."""

    async def scenario(root: Path) -> None:
        session = Session()
        await session.start(root)
        try:
            await coroutine_function(session, root)
        finally:
            session.kill()

    _run(scenario, tmp_path)


#: the server's debounce (:data:`accumlint.lsp.server.DEBOUNCE_S`)
DEBOUNCE = 0.3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs, /dev/zero and /proc (memory)")
def test_saves_and_changes_of_unopened_fifos_and_devices_never_block(tmp_path: Path) -> None:
    """Reproduction: a didSave of a never-opened FIFO path blocked the server forever, of a
    ``/dev/zero`` link read 6 GB; a didChange of one did the same after the debounce."""
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    (tmp_path / "huge.py").write_bytes(b"#" * (5 * 2**20))  # past the size limit: read no further

    async def scenario(session: Session, root: Path) -> None:
        with _PeakMemory(_server_pid(session)) as memory:
            for name in ("fifo.py", "zero.py", "huge.py"):
                uri = (root / name).as_uri()
                session.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
                session.client.text_document_did_change(
                    types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(uri=uri, version=2), [])
                )
            await asyncio.sleep(DEBOUNCE + 0.5)
            assert await _hover(session, (root / "fifo.py").as_uri(), 5) is None  # answered
            open_uri = _open(session, root / "train.py", BAD)
            [diagnostic] = await session.next_diagnostics(open_uri, 1)
            assert diagnostic.code == "ACC001"
            assert await _stopped_within(session, 5) < 1
        assert memory.peak < 400 * 2**20
        assert (root / "fifo.py").exists() and (root / "zero.py").is_symlink()  # nothing replaced

    _hostile(scenario, tmp_path)


def test_a_request_with_invalid_params_gets_an_error(tmp_path: Path) -> None:
    """Reproduction: a hover without ``position`` got no answer at all."""
    from concurrent.futures import Future

    from pygls.exceptions import JsonRpcException

    async def scenario(session: Session, root: Path) -> None:
        uri = _open(session, root / "train.py", BAD)
        await session.next_diagnostics(uri, 1)
        protocol = session.client.protocol  # the client's own types would refuse to send it
        answer: Future[object] = Future()
        protocol._request_futures["bad-hover"] = answer
        hover = {"jsonrpc": "2.0", "id": "bad-hover", "method": "textDocument/hover"}
        protocol._send_data({**hover, "params": {"textDocument": {"uri": uri}}})
        with pytest.raises(JsonRpcException) as error:
            await asyncio.wait_for(asyncio.wrap_future(answer), 5)
        assert error.value.code == -32602  # InvalidParams
        answered = await _hover(session, uri, 5)  # the server goes on: the loop's timeline on its first line
        assert answered is not None and "simulated this loop" in answered.contents.value  # type: ignore[union-attr]
        await session.stop()

    _hostile(scenario, tmp_path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory limit and /proc are Linux's")
def test_a_pathological_document_gets_acc000_and_the_server_stays_bounded(tmp_path: Path) -> None:
    """Reproduction: a 60 KB ``x = 2**2**...`` (20,000 operators) took the server past 6 GB; a
    100,000-line document blocked it for 58.6 s. Now: ``ACC000``, hovers answered meanwhile, and
    a shutdown answered within 1 s while a check runs."""
    (tmp_path / "pyproject.toml").write_text("[tool.accumlint]\nparse-timeout = 1\n", encoding="utf-8")
    power = LOOP_HEAD + "x = " + "2**" * 20_000 + "2\n"
    long_document = BAD * 17_000  # 102,000 lines

    async def scenario(session: Session, root: Path) -> None:
        import time

        with _PeakMemory(_server_pid(session)) as memory:
            power_uri = _open(session, root / "power.py", power)
            [deep] = await session.next_diagnostics(power_uri, 1)
            assert deep.code == "ACC000"
            assert deep.message == "file could not be checked: nesting too deep or code too large for the parser"

            long_uri = _open(session, root / "long.py", long_document)
            await asyncio.sleep(0.5)  # its check is running in a worker
            start = time.monotonic()
            assert await _hover(session, power_uri, 5) is not None  # over the ACC000
            assert time.monotonic() - start < 1
            [late] = await session.next_diagnostics(long_uri, 1)
            assert late.code == "ACC000"
            # past the time budget (1 s, stretched by the machine's load), or first past the memory limit
            assert late.message.startswith((
                "file could not be checked: took too long to parse (more than 1 s)",
                "file could not be checked: too large to check (its check needed more than 1 GiB of memory)",
            ))

            session.client.text_document_did_change(  # checked again, and shut down meanwhile
                types.DidChangeTextDocumentParams(
                    types.VersionedTextDocumentIdentifier(uri=long_uri, version=2),
                    [types.TextDocumentContentChangeWholeDocument(text=long_document + "\n")],
                )
            )
            await asyncio.sleep(DEBOUNCE + 0.5)
            assert await _stopped_within(session, 5) < 1
        assert memory.peak < 10**9

    _hostile(scenario, tmp_path)


# --- a server that answers while it analyses (issue 33, item 2) ----------------------------------

#: the text of a document whose check blocks (tests/lsp/lsp_blocking_server.py) until released
BLOCKED_CHECK = "# block-check\n" + BAD
#: the text of a document whose fix verification blocks
BLOCKED_VERIFY = "# block-verify\n" + BAD


async def _started(signal: Path) -> None:
    """Wait until the blocking server's worker created ``signal`` (it reached the blocking point)."""
    for _ in range(TIMEOUT * 100):
        if signal.exists():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{signal.name} never appeared")


def _blocking(coroutine_function, tmp_path: Path, *, progress: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Run ``coroutine_function(session, root, signals)`` against the blocking server (started
    in ``root``, its signals in ``signals``), killed if the test failed."""
    signals = tmp_path / "signals"
    signals.mkdir()
    root = tmp_path / "project"
    root.mkdir()

    async def scenario(_: Path) -> None:
        session = Session()
        await session.start(root, "tests.lsp.lsp_blocking_server", str(signals), progress=progress)
        try:
            await coroutine_function(session, root, signals)
        finally:
            (signals / "release").touch()
            session.kill()

    _run(scenario, tmp_path)


def _change(session: Session, uri: str, version: int, text: str) -> None:
    session.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def test_a_slow_document_does_not_hold_back_another(tmp_path: Path) -> None:
    """Reproduction: an edit to a small file got its diagnostics 67 s later, queued behind the
    analysis of a large one. Now a blocked check of one document leaves another's alone."""

    async def scenario(session: Session, root: Path, signals: Path) -> None:
        slow = _open(session, root / "slow.py", BLOCKED_CHECK)
        await _started(signals / "check-started")
        small = _open(session, root / "small.py", BAD)
        [diagnostic] = await session.next_diagnostics(small, 1)  # while slow.py's check still blocks
        assert diagnostic.code == "ACC001"
        assert slow not in session.published
        assert await _hover(session, small, TIMEOUT) is not None  # a request is answered meanwhile too
        (signals / "release").touch()
        [late] = await session.next_diagnostics(slow, 1)
        assert late.code == "ACC001" and late.range.start.line == 3  # the marker line shifts it by one
        await session.stop()

    _blocking(scenario, tmp_path)


def test_documents_opened_at_once_on_a_fresh_server_are_all_checked(tmp_path: Path) -> None:
    """Reproduction: the first checks, started side by side, imported the analysis modules on
    two threads at once; one saw the other's half-initialized module (``ImportError``) and its
    document never got diagnostics."""

    async def scenario(session: Session, root: Path) -> None:
        uris = [_open(session, root / f"train_{n}.py", BAD) for n in range(4)]
        for uri in uris:
            [diagnostic] = await session.next_diagnostics(uri, 1)
            assert diagnostic.code == "ACC001"
        await session.stop()

    _hostile(scenario, tmp_path)


def test_a_change_cancels_the_stale_check(tmp_path: Path) -> None:
    """A didChange while a check runs kills it: only the new version's diagnostics are published."""

    async def scenario(session: Session, root: Path, signals: Path) -> None:
        uri = _open(session, root / "train.py", BLOCKED_CHECK)
        await _started(signals / "check-started")
        _change(session, uri, 2, FIXED)
        assert await session.next_diagnostics(uri, 1) == []  # version 2: fixed, nothing to show
        (signals / "release").touch()  # version 1's worker, had it lived, would finish now
        _change(session, uri, 3, BAD)
        [diagnostic] = await session.next_diagnostics(uri, 2)
        assert diagnostic.code == "ACC001"
        assert session.versions[uri] == [2, 3]  # version 1 (blocked, then cancelled) never published
        await session.stop()

    _blocking(scenario, tmp_path)


def test_a_cancelled_code_action_answers_request_cancelled(tmp_path: Path) -> None:
    """$/cancelRequest on a code action whose fix verification runs: ``RequestCancelled``, and
    the server goes on (the next code action of another document gets its fix)."""
    from pygls.exceptions import JsonRpcRequestCancelled

    async def scenario(session: Session, root: Path, signals: Path) -> None:
        uri = _open(session, root / "train.py", BLOCKED_VERIFY)
        [diagnostic] = await session.next_diagnostics(uri, 1)
        params = types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic]),
        )
        answer = session.client.protocol.send_request_async(types.TEXT_DOCUMENT_CODE_ACTION, params,
                                                            msg_id="slow-action")
        await _started(signals / "verify-started")
        session.client.cancel_request(types.CancelParams(id="slow-action"))
        with pytest.raises(JsonRpcRequestCancelled) as error:
            await asyncio.wait_for(answer, TIMEOUT)
        assert error.value.code == -32800

        other = _open(session, root / "other.py", BAD)
        [again] = await session.next_diagnostics(other, 1)
        titles = [a.title for a in await _code_actions(session, other, again)]
        assert titles[0].startswith("Fix ACC001") and "Disable ACC001 for this line (# noqa)" in titles
        await session.stop()

    _blocking(scenario, tmp_path)


def test_a_code_action_follows_the_documents_changes(tmp_path: Path) -> None:
    """A change while a code action runs kills its work (``ContentModified``); a code action on
    a version whose check is on its way is answered once that version is checked."""
    from pygls.exceptions import JsonRpcException

    async def scenario(session: Session, root: Path, signals: Path) -> None:
        uri = _open(session, root / "train.py", BLOCKED_VERIFY)
        [diagnostic] = await session.next_diagnostics(uri, 1)
        running = asyncio.ensure_future(_code_actions(session, uri, diagnostic))
        await _started(signals / "verify-started")
        _change(session, uri, 2, BLOCKED_CHECK)  # the same lines: the diagnostic's range holds
        with pytest.raises(JsonRpcException) as error:
            await running
        assert error.value.code == -32801  # ContentModified
        await _started(signals / "check-started")
        waiting = asyncio.ensure_future(_code_actions(session, uri, diagnostic))  # version 2: its check blocks
        (signals / "release").touch()
        [again] = await session.next_diagnostics(uri, 2)
        assert again.range == diagnostic.range
        titles = [a.title for a in await waiting]
        assert titles[0].startswith("Fix ACC001") and "Disable ACC001 for this line (# noqa)" in titles
        assert session.versions[uri] == [1, 2]
        await session.stop()

    _blocking(scenario, tmp_path)


def test_shutdown_answers_at_once_while_a_check_blocks(tmp_path: Path) -> None:
    async def scenario(session: Session, root: Path, signals: Path) -> None:
        _open(session, root / "train.py", BLOCKED_CHECK)
        await _started(signals / "check-started")
        assert await _stopped_within(session, 5) < 1

    _blocking(scenario, tmp_path)


def test_the_index_build_reports_progress(tmp_path: Path) -> None:
    """A client that supports work-done progress sees the first index build of a project
    (create, begin, end); the next check of the project reports none."""

    def kind(value: object) -> str | None:
        return value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)

    async def scenario(session: Session, root: Path, signals: Path) -> None:
        (root / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
        uri = _open(session, root / "train.py", BAD)
        await session.next_diagnostics(uri, 1)
        for _ in range(TIMEOUT * 100):  # the end is sent after the index is built, not waited for
            if any(kind(value) == "end" for _, value in session.progress):
                break
            await asyncio.sleep(0.01)
        [(create, token)] = [entry for entry in session.progress if entry[0] == "create"]
        messages = [value for name, value in session.progress if name == str(token)]
        assert [kind(value) for value in messages] == ["begin", "end"]
        title = messages[0].get("title") if isinstance(messages[0], dict) else messages[0].title
        assert title == "accumlint: indexing the project"
        other = _open(session, root / "other.py", BAD)
        await session.next_diagnostics(other, 1)
        assert [entry for entry in session.progress if entry[0] == "create"] == [(create, token)]
        await session.stop()

    _blocking(scenario, tmp_path, progress=True)


def test_a_hover_answers_from_the_check_of_the_editors_version(tmp_path: Path) -> None:
    """Reproduction: a hover asked while the edited text was being checked answered from the
    previous check, its findings at their old lines. Now it waits for the check of the version
    the editor shows."""

    async def scenario(session: Session, root: Path, signals: Path) -> None:
        uri = _open(session, root / "train.py", BAD)
        [old] = await session.next_diagnostics(uri, 1)
        assert old.range.start.line == 2
        other = _open(session, root / "other.py", BAD)
        await session.next_diagnostics(other, 1)
        _change(session, uri, 2, BLOCKED_CHECK)  # a line above: the finding moves to line 3
        await _started(signals / "check-started")
        moved, stale = (asyncio.ensure_future(session.client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(line, 10)))) for line in (3, 2))
        assert await _hover(session, other, TIMEOUT) is not None  # answered after both were received
        (signals / "release").touch()
        found = await asyncio.wait_for(moved, TIMEOUT)
        assert found is not None and isinstance(found.contents, types.MarkupContent)
        assert found.contents.value.startswith("**ACC001**")
        assert found.range is not None and found.range.start.line == 3
        assert await asyncio.wait_for(stale, TIMEOUT) is None  # the old line holds no finding now
        assert session.versions[uri] == [1, 2]
        await session.stop()

    _blocking(scenario, tmp_path)


def test_a_documents_project_index_is_kept_between_its_checks(tmp_path: Path) -> None:
    """Reproduction: every check of a document built its project index again (the modules it
    imports read, their names computed). Now the index is kept while the document's imports
    and the modules it reads are unchanged, and built again when a module it reads changes."""
    from accumlint.lsp.server import AccumlintServer
    from tests.runs.test_index_cache import QUIET, RESETS, TRAIN, UTILS

    (tmp_path / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
    (tmp_path / "helpers.py").write_text(QUIET, encoding="utf-8")
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    server = AccumlintServer()
    uri = (tmp_path / "train.py").as_uri()

    def check(text: str):  # type: ignore[no-untyped-def]
        checked, error = server.check_text(uri, None, text, text.encode())
        assert error is None
        return checked

    first = check(TRAIN)
    assert first.findings == []  # the helper performs no backward: the loop is cleared
    edited = check(TRAIN + "# edited\n")
    assert edited.index is first.index
    (tmp_path / "helpers.py").write_text(RESETS, encoding="utf-8")  # saved: it resets on every call
    saved = check(TRAIN + "# edited\n")
    assert saved.index is not first.index
    assert [finding.code for finding in saved.findings] == ["ACC001"]


def test_a_module_created_outside_the_editor_is_resolved_by_the_kept_index(tmp_path: Path) -> None:
    """The kept project index resolves a document's imports anew when the client's file
    watchers report a Python file created (a ``git checkout``, not the editor's save)."""
    from tests.runs.test_index_cache import RESETS, TRAIN, UTILS

    async def scenario(root: Path) -> None:
        (root / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
        (root / "utils.py").write_text(UTILS, encoding="utf-8")
        session = Session()
        await session.start(root, watchers=True)
        try:
            uri = _open(session, root / "train.py", TRAIN)
            assert await session.next_diagnostics(uri, 1) == []  # no helpers.py yet: nothing followed
            for _ in range(TIMEOUT * 100):
                if session.registrations:
                    break
                await asyncio.sleep(0.01)
            assert session.registrations == [types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
            helpers = root / "helpers.py"
            helpers.write_text(RESETS, encoding="utf-8")  # the helper resets on every call
            session.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
                changes=[types.FileEvent(uri=helpers.as_uri(), type=types.FileChangeType.Created)]))
            _change(session, uri, 2, TRAIN + "# edited\n")  # an edit of no import
            [diagnostic] = await session.next_diagnostics(uri, 2)
            assert diagnostic.code == "ACC001"
        finally:
            await session.stop()

    _run(scenario, tmp_path)


# --- notebooks (LSP 3.17 notebook sync) -------------------------------------------------

#: a notebook as an editor syncs it: markdown, a setup cell with a magic, the loop (ACC001 on its
#: line 4), a code cell in another language
NOTEBOOK_CELLS = [
    (types.NotebookCellKind.Markup, "markdown", "# Training\nThe loop below accumulates 4 microbatches."),
    (types.NotebookCellKind.Code, "python", "%matplotlib inline\nimport torch\nA = 4"),
    (types.NotebookCellKind.Code, "python", BAD.replace("/ 4", "/ A").replace("% 4", "% A").replace(
        "for i, batch", "# the loop\nfor i, batch").rstrip("\n")),
    (types.NotebookCellKind.Code, "sql", "SELECT * FROM runs"),
]


def _open_notebook(session: Session, path: Path, cells: list[tuple[int, str, str]]) -> list[str]:
    """Send ``notebookDocument/didOpen`` for ``path`` with ``cells`` (kind, language, text), with
    cell URIs as VS Code makes them; the cell URIs."""
    uris = [f"vscode-notebook-cell:{path.as_posix()}#W{index}sZmlsZQ%3D%3D" for index in range(len(cells))]
    session.client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=path.as_uri(), notebook_type="jupyter-notebook", version=1,
                cells=[types.NotebookCell(kind=kind, document=uri)
                       for uri, (kind, _, _) in zip(uris, cells, strict=True)],
            ),
            cell_text_documents=[types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
                                 for uri, (_, language, text) in zip(uris, cells, strict=True)],
        )
    )
    return uris


def test_a_notebooks_code_cells_get_their_diagnostics(tmp_path: Path) -> None:
    """An ``.ipynb`` opened with notebook sync is checked as ``accumlint check`` checks the file:
    ACC001 lands on the loop's cell at its line in that cell (the magic of the cell before is
    neutralized, the markdown and SQL cells are not Python); an edit of the cell clears it, the
    nearest configuration applies, and closing the notebook clears its cells."""
    (tmp_path / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
    (tmp_path / "quiet").mkdir()
    (tmp_path / "quiet" / "pyproject.toml").write_text('[tool.accumlint]\nignore = ["ACC001"]\n', encoding="utf-8")

    async def scenario(root: Path) -> None:
        session = Session()
        init = await session.start(root, notebooks=True)
        sync = init.capabilities.notebook_document_sync
        assert isinstance(sync, types.NotebookDocumentSyncOptions) and sync.save
        [selector] = sync.notebook_selector
        assert selector.notebook == "jupyter-notebook"
        try:
            uris = _open_notebook(session, root / "train.ipynb", NOTEBOOK_CELLS)
            [diagnostic] = await session.next_diagnostics(uris[2], 1)
            assert diagnostic.code == "ACC001"
            # `optimizer.zero_grad()` on line 4 of the loop's cell, columns 5-26 (1-based)
            assert diagnostic.range == types.Range(types.Position(3, 4), types.Position(3, 25))
            for other in (uris[0], uris[1], uris[3]):
                assert await session.next_diagnostics(other, 1) == []
            hover = await asyncio.wait_for(session.client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(uris[2]), types.Position(3, 10))), TIMEOUT)
            assert hover is not None and isinstance(hover.contents, types.MarkupContent)
            assert hover.contents.value.startswith("**ACC001** `zero-grad-inside-group` (error)")
            assert hover.range == diagnostic.range
            for elsewhere in ((uris[1], types.Position(3, 10)), (uris[2], types.Position(2, 10))):
                assert await asyncio.wait_for(session.client.text_document_hover_async(
                    types.HoverParams(types.TextDocumentIdentifier(elsewhere[0]), elsewhere[1])), TIMEOUT) is None

            loop_cell = NOTEBOOK_CELLS[2][2]
            actions = await _code_actions(session, uris[2], diagnostic)
            fix = next(a for a in actions if a.title.startswith("Fix ACC001"))
            assert fix.is_preferred and fix.edit is not None and fix.edit.changes is not None
            assert list(fix.edit.changes) == [uris[2]]  # an edit of the cell, not of the .ipynb
            fixed = _apply(loop_cell, fix.edit.changes[uris[2]])
            assert fixed == loop_cell.replace("    optimizer.zero_grad()\n", "") + "\n        optimizer.zero_grad()"
            noqa = next(a for a in actions if "noqa" in a.title)
            assert noqa.edit is not None and noqa.edit.changes is not None
            silenced = _apply(loop_cell, noqa.edit.changes[uris[2]])
            assert silenced.splitlines()[3] == "    optimizer.zero_grad()  # noqa: ACC001"
            assert await _code_actions(session, uris[1], diagnostic) == []  # the setup cell has no finding
            notebook = types.VersionedNotebookDocumentIdentifier(version=2, uri=(root / "train.ipynb").as_uri())
            session.client.notebook_document_did_change(
                types.DidChangeNotebookDocumentParams(
                    notebook_document=notebook,
                    change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=uris[2], version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
                        )
                    ])),
                )
            )
            assert await session.next_diagnostics(uris[2], 2) == []

            quiet = _open_notebook(session, root / "quiet" / "train.ipynb", NOTEBOOK_CELLS)
            assert await session.next_diagnostics(quiet[2], 1) == []  # quiet/pyproject.toml ignores ACC001

            again = _open_notebook(session, root / "again.ipynb", NOTEBOOK_CELLS)
            assert len(await session.next_diagnostics(again[2], 1)) == 1
            # a cell inserted above: the finding stays on the loop's cell document, now cell 5
            added = f"vscode-notebook-cell:{(root / 'again.ipynb').as_posix()}#Wnew"
            session.client.notebook_document_did_change(
                types.DidChangeNotebookDocumentParams(
                    notebook_document=types.VersionedNotebookDocumentIdentifier(
                        version=2, uri=(root / "again.ipynb").as_uri()),
                    change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(
                        structure=types.NotebookDocumentCellChangeStructure(
                            array=types.NotebookCellArrayChange(start=0, delete_count=0, cells=[
                                types.NotebookCell(kind=types.NotebookCellKind.Markup, document=added)]),
                            did_open=[types.TextDocumentItem(uri=added, language_id="markdown", version=1,
                                                             text="# Notes")],
                        ))),
                )
            )
            [moved] = await session.next_diagnostics(again[2], 2)
            assert moved.code == "ACC001" and moved.range.start == types.Position(3, 4)
            assert await session.next_diagnostics(added, 1) == []
            session.client.notebook_document_did_close(
                types.DidCloseNotebookDocumentParams(
                    notebook_document=types.NotebookDocumentIdentifier(uri=(root / "again.ipynb").as_uri()),
                    cell_text_documents=[types.TextDocumentIdentifier(uri=uri) for uri in again],
                )
            )
            assert await session.next_diagnostics(again[2], 3) == []
        finally:
            await session.stop()

    _run(scenario, tmp_path)
