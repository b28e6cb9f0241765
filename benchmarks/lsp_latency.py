"""What an editor waits for: the language server's latency per request kind, scripted.

    python benchmarks/lsp_latency.py [--lines 3000] [--edits 20] [--rounds 5] [--checkout PATH]

Starts ``accumlint server`` (of ``--checkout``, default this one) in a temporary project
holding :func:`training_script.build`'s script (about ``lines`` lines, ~15 findings) and a
small training loop, and drives it as an editor does, with pygls' client over stdio:

* **open**: didOpen until the first diagnostics, each file;
* **edit**: ``edits`` changes, each waited for (didChange until the diagnostics of its version:
  the debounce, then the check), each file; then ``edits`` changes typed 50 ms apart, the
  diagnostics of the last one timed from the last change ("burst");
* **code action**: a request at each diagnostic's range (the fixes of the findings there
  verified), each file; then ``rounds`` times one asked at once after an edit of the large file
  (answered once the new text is checked: the debounce, the check and the verification);
* **small file while the large one is analysed**: ``rounds`` times, the large file is changed,
  and once its check runs the small one is changed too; the small file's latency minus its
  median latency on an idle server is the delay the large file's analysis costs it;
* **shutdown**: while the large file's check runs, the time ``shutdown`` takes to answer.

"check alone" is the large file's check (:func:`accumlint.run.runner.check_one` with its index), timed
in a process of its own: the floor of what an edit can cost. Prints p50/p95 in milliseconds
(the nearest-rank percentiles) and the lines ``bench.py`` summarises (``  =>``). Not a test:
the figures depend on the machine, so nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_script import build  # noqa: E402 - the generator beside this script

REPO = Path(__file__).resolve().parents[1]
SMALL = """\
import torch


def train(model, loader, optimizer, accumulation_steps=4):
    for i, batch in enumerate(loader):
        loss = model(batch).mean() / accumulation_steps
        optimizer.zero_grad()
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
"""
#: the server's debounce (:data:`accumlint.lsp.server.DEBOUNCE_S`): the wait before a change is checked
DEBOUNCE = 0.3
TIMEOUT = 600.0
CHECK_ALONE = """\
import sys, time
from accumlint.run import runner
from accumlint.settings.hierarchy import Resolver
path = sys.argv[1]
data = open(path, "rb").read()
resolver = Resolver()
settings = resolver.settings_for(path)
codes = resolver.codes_for(path)
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    runner.check_one(path, data, codes, str(settings.project_root), suggest=True)
    times.append(time.perf_counter() - start)
print(sorted(times)[len(times) // 2])
"""


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class Editor:
    """A client of ``accumlint server``: opens and edits documents, times their diagnostics."""

    def __init__(self) -> None:
        self.client = LanguageClient("lsp-latency", "1")
        self.arrivals: dict[tuple[str, int | None], float] = {}  # (uri, version) -> time of its diagnostics
        self.count: dict[tuple[str, int | None], int] = {}
        self.diagnostics: dict[str, list[types.Diagnostic]] = {}
        self.changed = asyncio.Event()
        self.versions: dict[str, int] = {}
        self.texts: dict[str, str] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            key = (params.uri, params.version)
            self.arrivals.setdefault(key, time.perf_counter())
            self.count[key] = len(params.diagnostics)
            self.diagnostics[params.uri] = list(params.diagnostics)
            self.changed.set()

    async def start(self, root: Path, checkout: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        await self.client.start_io(sys.executable, "-m", "accumlint", "server", cwd=str(root), env=env)
        await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), root_uri=root.as_uri(), process_id=None)), TIMEOUT)
        self.client.initialized(types.InitializedParams())

    async def arrived(self, uri: str, version: int) -> float:
        """Wait for the diagnostics of ``uri`` at ``version``; the time they arrived."""
        while (uri, version) not in self.arrivals:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), TIMEOUT)
        return self.arrivals[(uri, version)]

    def open(self, path: Path, text: str) -> tuple[str, float]:
        uri = path.as_uri()
        self.versions[uri], self.texts[uri] = 1, text
        sent = time.perf_counter()
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri, sent

    def edit(self, uri: str) -> tuple[int, float]:
        """Change ``uri`` as typing would (a comment grows on a line in its middle); the new
        version and when it was sent."""
        lines = self.texts[uri].split("\n")
        middle = len(lines) // 2
        while not lines[middle].strip():
            middle += 1
        lines[middle] += " #" if "#" not in lines[middle] else "x"
        self.texts[uri] = "\n".join(lines)
        self.versions[uri] = version = self.versions[uri] + 1
        sent = time.perf_counter()
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangeWholeDocument(text=self.texts[uri])]))
        return version, sent

    async def edited(self, uri: str) -> float:
        """Seconds from a change of ``uri`` to its diagnostics."""
        version, sent = self.edit(uri)
        return await self.arrived(uri, version) - sent

    async def code_actions(self, uri: str, limit: int | None = None) -> list[float]:
        """Seconds of a code action at each diagnostic of ``uri`` (the first ``limit`` ones)."""
        times = []
        for diagnostic in self.diagnostics.get(uri, [])[:limit]:
            start = time.perf_counter()
            await asyncio.wait_for(self.client.text_document_code_action_async(types.CodeActionParams(
                types.TextDocumentIdentifier(uri), diagnostic.range,
                types.CodeActionContext(diagnostics=[diagnostic]))), TIMEOUT)
            times.append(time.perf_counter() - start)
        return times

    async def stop(self) -> float:
        """Seconds ``shutdown`` took to answer; then the server exits."""
        start = time.perf_counter()
        await asyncio.wait_for(self.client.shutdown_async(None), TIMEOUT)
        took = time.perf_counter() - start
        self.client.exit(None)
        await asyncio.wait_for(self.client.stop(), TIMEOUT)
        return took


def line(kind: str, values: Sequence[float]) -> str:
    """A request kind's p50 and p95 (milliseconds)."""
    ms = [v * 1000 for v in values]
    return f"    {kind:<40} p50 {percentile(ms, 0.5):8.0f} ms   p95 {percentile(ms, 0.95):8.0f} ms   (n={len(ms)})"


async def scenario(root: Path, checkout: Path, edits: int, rounds: int) -> tuple[list[str], dict[str, list[float]]]:
    """The scripted session; its printed lines and the seconds of each request kind."""
    large_path, small_path = root / "train.py", root / "small.py"
    editor = Editor()
    await editor.start(root, checkout)
    results: dict[str, list[float]] = {}
    try:
        for name, path in (("large", large_path), ("small", small_path)):
            uri, sent = editor.open(path, path.read_text(encoding="utf-8"))
            results[f"open ({name})"] = [await editor.arrived(uri, 1) - sent]
            results[f"edit ({name})"] = [await editor.edited(uri) for _ in range(edits)]
            for _ in range(edits):  # typed: 50 ms apart, the diagnostics of the last change timed
                version, sent = editor.edit(uri)
                await asyncio.sleep(0.05)
            results[f"edit burst, last ({name})"] = [await editor.arrived(uri, version) - sent]
            results[f"code action ({name})"] = await editor.code_actions(uri)
        large, small = large_path.as_uri(), small_path.as_uri()
        after = []
        for _ in range(rounds):  # asked at once: answered when the new text is checked
            version, sent = editor.edit(large)
            await editor.code_actions(large, limit=1)
            after.append(time.perf_counter() - sent)
            await editor.arrived(large, version)
        results["code action right after an edit (large)"] = after
        idle = [await editor.edited(small) for _ in range(rounds)]
        busy = []
        for _ in range(rounds):
            version, _ = editor.edit(large)
            await asyncio.sleep(DEBOUNCE + 0.1)  # its check now runs
            busy.append(await editor.edited(small))
            await editor.arrived(large, version)
        results["edit (small, idle server)"] = idle
        results["edit (small, large one analysed)"] = busy
        editor.edit(large)
        await asyncio.sleep(DEBOUNCE + 0.1)
        results["shutdown (a check in flight)"] = [await editor.stop()]
    finally:
        server = editor.client._server  # type: ignore[attr-defined]
        if server is not None and server.returncode is None:
            server.kill()
    out = [line(kind, values) for kind, values in results.items()]
    delay = statistics.median(busy) - statistics.median(idle)
    out.append(f"  => LSP: small file delayed by {delay * 1000:.0f} ms while the large one is analysed "
               f"(median of {rounds}; target <= 300 ms {'MET' if delay <= 0.3 else 'MISSED'})")
    shutdown = results["shutdown (a check in flight)"][0]
    out.append(f"  => LSP: shutdown with a check in flight {shutdown * 1000:.0f} ms "
               f"(target <= 1000 ms {'MET' if shutdown <= 1 else 'MISSED'})")
    return out, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the small-file-while-busy measure")
    parser.add_argument("--checkout", type=Path, default=REPO)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="accumlint-lsp-") as directory:
        root = Path(directory)
        (root / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
        (root / "train.py").write_text(build(args.lines), encoding="utf-8")
        (root / "small.py").write_text(SMALL, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(args.checkout)}
        alone = float(subprocess.run([sys.executable, "-c", CHECK_ALONE, str(root / "train.py"), "3"], env=env,
                                     capture_output=True, text=True, check=True).stdout)
        lines = (root / "train.py").read_text(encoding="utf-8").count("\n")
        print(f"LSP latency: train.py {lines} lines, small.py {SMALL.count(chr(10))} lines; server of "
              f"{args.checkout}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        out, results = asyncio.run(scenario(root, args.checkout, args.edits, args.rounds))
    for text in out:
        if not text.startswith("  =>"):
            print(text)
    print(f"    {'check alone (large, no server)':<40} p50 {alone * 1000:8.0f} ms")
    burst = results["edit burst, last (large)"][0]
    verdict = burst - alone - DEBOUNCE
    print(f"  => LSP: last of {args.edits} edits to the large file: diagnostics {burst * 1000:.0f} ms after it, "
          f"{verdict * 1000:.0f} ms past the debounce and the check alone (target <= 1500 ms "
          f"{'MET' if verdict <= 1.5 else 'MISSED'})")
    for text in out:
        if text.startswith("  =>"):
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
