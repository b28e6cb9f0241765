"""Project roots, module names and the project modules a file's model may follow (see the
package docstring)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accumlint.files.reading import NotARegularFile, Signature, read_signed, read_source, signature_of
from accumlint.spec.vocabulary import LOSS_HELPER_NAME

if TYPE_CHECKING:
    import libcst as cst
    from ahocorasick_rs import BytesAhoCorasick

    from accumlint.model.module_functions import ModuleFunctions
    from accumlint.pipeline.byte_stage import Vocabulary

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")
#: LibCST trees of project modules kept per process, and the source bytes they may hold
#: together (a tree takes ~400 bytes per source byte: 256 KiB of sources ≈ 100 MB)
MAX_LOADED = 32
MAX_LOADED_BYTES = 256 * 1024
#: a project module larger than this is not loaded to follow its functions
MAX_MODULE_BYTES = 128 * 1024
#: the bytes of checked files kept to find the importers that name an entry (see ProjectIndex.importers)
MAX_KEPT_TEXT_BYTES = 4 * 1024 * 1024
#: importers' trees kept per process to simulate the callers of the modules they import: at most
#: this many, their sources at most :data:`MAX_MODULE_BYTES` together (~50 MB of trees)
MAX_KEPT_IMPORTERS = 8
#: substrings every helper marker contains one of (backward, zero_grad, clip_*, the wrappers, losses)
_NEEDLES = (b"backward", b"zero_grad", b"clip_grad", b"DataParallel", b"FSDP", b"fully_shard",
            b"cross_entropy", b"nll_loss", b"update_params", b"mul_(", b"lerp_(")
#: in-place work on a model's tensors that a rule reads as an event where a caller in another module runs
#: it: a weight average (`mul_`/`lerp_` in a walk over a model's parameters or state dict) or a rescale
#: of the gradients by hand (`p.grad.mul_(coef)`, a norm clip written out)
_GRADIENT_WORK = re.compile(rb"\.(?:mul_|lerp_)\(")
_WEIGHT_WALK = re.compile(rb"\b(?:named_parameters|parameters|state_dict)\(\)")
_GRAD_RESCALE = re.compile(rb"\.grad(?:\.data)?\.(?:mul_|div_)\(")


def _by_hand(block: bytes) -> bool:
    """Whether a top-level block averages weights or rescales gradients by hand (:data:`_GRADIENT_WORK`
    with a walk over a model's tensors, or ``.grad`` rescaled in place): a call of it from another
    module is an event the rules read (ACC007, ACC301, ACC307), though it holds no backward."""
    return bool(_GRADIENT_WORK.search(block)) and (
        bool(_WEIGHT_WALK.search(block)) or bool(_GRAD_RESCALE.search(block)))
#: marks a name whose block performs no event but is worth following from a loop: it computes a
#: token loss, builds an object that counts the microbatches or loads a checkpoint (see
#: ProjectIndex.names_of)
FOLLOW_ONLY = "~"
#: marks a class of a module whose own code performs no event, with the names of its bases
#: (``"<PPOTrainer:RLTrainer"``): the run resolves it (:func:`resolve_derived`) into a name to follow
#: where a base performs events in another module (a trainer whose loop its base in another file runs)
DERIVES = "<"
#: the project modules one checked file's model may follow into
MAX_FOLLOWED_MODULES = 4
#: more modules a targeted question (``any_module``: a loader class's collate function, a relay) may
#: load once the events' modules used up :data:`MAX_FOLLOWED_MODULES`: a script that imports many event
#: modules must still see where its labels are built
MAX_ASKED_MODULES = 4
#: re-exports followed through a package's ``__init__`` (``from .sub import f``)
MAX_REEXPORT_DEPTH = 3
#: the prefilter reads at most this many project files to learn which names perform a backward
MAX_SCANNED = 20_000


def find_root(path: str, fallback: str, known: dict[str, str | None] | None = None) -> str:
    """The folder of the nearest ``pyproject.toml`` / ``setup.py`` / ``setup.cfg`` at or above
    ``path``'s folder, else ``fallback`` (the folder the run was started on). ``known``:
    folder → its marked root or None, shared between calls (each folder is looked at once)."""
    known = {} if known is None else known
    folder = os.path.dirname(os.path.abspath(path))
    seen: list[str] = []
    found: str | None = None
    while True:
        if folder in known:
            found = known[folder]
            break
        seen.append(folder)
        if any(os.path.isfile(os.path.join(folder, marker)) for marker in ROOT_MARKERS):
            found = folder
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for folder in seen:
        known[folder] = found
    return found if found is not None else os.path.abspath(fallback)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_ABSENT = object()


@dataclass
class _Loaded:
    functions: ModuleFunctions
    digest: str
    size: int


@dataclass
class ProjectIndex:
    """The project modules of one run: ``roots`` (absolute folders) and the checked ``files``.

    Picklable: worker processes receive it and load trees on demand. ``event_names`` (bytes)
    are the top-level functions and classes that project modules calling a backward define;
    a file that mentions one may run a backward through it and so passes the prefilter.
    """

    roots: tuple[str, ...]
    files: tuple[str, ...] = ()
    #: the byte stage's vocabulary, which decides :meth:`names_of` (None: the engine's)
    vocabulary: Vocabulary | None = None
    _loaded: OrderedDict[str, _Loaded | None] = field(default_factory=OrderedDict, repr=False)
    _names: frozenset[bytes] | None = field(default=None, repr=False)
    _followed: frozenset[bytes] | None = field(default=None, repr=False)
    _roots: frozenset[str] | None = field(default=None, repr=False)
    _root_cache: dict[str, str | None] = field(default_factory=dict, repr=False)
    _located: dict[tuple[str, str, str], list[tuple[str, str]]] = field(default_factory=dict, repr=False)
    _module_paths: dict[tuple[str, ...], str | None] = field(default_factory=dict, repr=False)
    #: folder -> (its file names, its folder names), listed once (a stat per candidate module
    #: costs more: a file of a package imports dozens of names from each of three folders)
    _listings: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict, repr=False)

    _reachable: dict[str, frozenset[bytes]] | None = field(default=None, repr=False)
    _searches: dict[frozenset[bytes], object] = field(default_factory=dict, repr=False)
    _importers: dict[str, list[str]] | None = field(default=None, repr=False)
    #: path -> (its bytes, their stat signature), and their sum: what importers() scans (kept while the
    #: signature holds: an editor's save, or any write, changes it)
    _texts: OrderedDict[str, tuple[bytes, Signature]] = field(default_factory=OrderedDict, repr=False)
    _text_bytes: int = field(default=0, repr=False)
    #: path -> (the stat signature of its bytes, its functions): the importers whose entries were simulated
    _callers: OrderedDict[str, tuple[Signature, _Loaded | None]] = field(default_factory=OrderedDict, repr=False)

    def __getstate__(self) -> dict:
        return {"roots": self.roots, "files": self.files, "vocabulary": self.vocabulary, "_names": self._names,
                "_followed": self._followed, "_reachable": self._reachable}

    def __setstate__(self, state: dict) -> None:
        self.roots, self.files, self._names = state["roots"], state["files"], state["_names"]
        self.vocabulary = state["vocabulary"]
        self._followed, self._reachable = state["_followed"], state["_reachable"]
        self._loaded, self._searches, self._importers = OrderedDict(), {}, None
        self._roots, self._root_cache, self._located, self._module_paths = None, {}, {}, {}
        self._listings, self._texts, self._text_bytes, self._callers = {}, OrderedDict(), 0, OrderedDict()

    @classmethod
    def for_files(cls, files: Sequence[str], fallback: str, vocabulary: Vocabulary | None = None) -> ProjectIndex:
        """The index of the roots that ``files`` lie in (``fallback``: the run's own folder), whose
        names a ``vocabulary`` decides (None: the engine's)."""
        absolute = [os.path.abspath(path) for path in files]
        fallback = os.path.abspath(fallback)
        outside = [path for path in absolute if not path.startswith(fallback + os.sep)]
        common = fallback
        if outside:  # files outside the configured root: their common folder is the checked one
            try:
                common = os.path.commonpath([os.path.dirname(path) for path in outside])
            except ValueError:  # several drives
                common = os.path.dirname(outside[0])
        folders: dict[str, str] = {}
        known: dict[str, str | None] = {}
        roots: set[str] = set()
        for path in absolute:
            folder = os.path.dirname(path)
            if folder not in folders:
                folders[folder] = find_root(path, fallback if path.startswith(fallback + os.sep) else common, known)
            roots.add(folders[folder])
        return cls(tuple(sorted(roots)), tuple(absolute), vocabulary)

    # --- names and paths -------------------------------------------------------------------
    def root_of(self, path: str) -> str | None:
        """The innermost root holding ``path`` (None: none), from its folders upwards."""
        if self._roots is None:
            self._roots, self._root_cache = frozenset(self.roots), {}
        folder = os.path.dirname(os.path.abspath(path))
        cached = self._root_cache.get(folder, "")
        if cached != "":
            return cached
        current, found = folder, None
        while True:
            if current in self._roots:
                found = current
                break
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        self._root_cache[folder] = found
        return found

    def search_paths(self, importer: str) -> list[str]:
        """Where an absolute import of ``importer`` is looked for: its own folder (a script's
        ``sys.path[0]``), then its root and the root's ``src/``."""
        folders = [os.path.dirname(os.path.abspath(importer))]
        root = self.root_of(importer)
        if root is not None:
            folders += [root, os.path.join(root, "src")]
        return list(dict.fromkeys(folders))

    def _folders_for(self, importer: str, parts: Sequence[str]) -> list[str]:
        """:meth:`search_paths` for an import of ``parts``, and the root's parent where the import
        names the root's own folder first (``import mae_st.util.misc`` in the project ``mae_st/``:
        the checkout is the package, found from the folder above it)."""
        folders = self.search_paths(importer)
        root = self.root_of(importer)
        if root is not None and parts and parts[0] == os.path.basename(root):
            folders.append(os.path.dirname(root))
        return folders

    def module_path(self, folder: str, parts: Sequence[str]) -> str | None:
        """The file of module ``parts`` under ``folder`` (``a/b.py`` or ``a/b/__init__.py``;
        namespace packages need no ``__init__``)."""
        key = (folder, *parts)
        if key in self._module_paths:  # every file of a folder imports much the same: look once
            return self._module_paths[key]
        # by the folders' listings, as the import system finds modules (names compare exactly,
        # also where the file system ignores case); a folder that is not there lists nothing
        package = os.path.join(folder, *parts[:-1])
        files, folders = self._listing(package)
        found = None
        if parts[-1] + ".py" in files:
            found = os.path.join(package, parts[-1] + ".py")
        elif parts[-1] in folders and "__init__.py" in self._listing(os.path.join(package, parts[-1]))[0]:
            found = os.path.join(package, parts[-1], "__init__.py")
        self._module_paths[key] = found
        return found

    def _listing(self, folder: str) -> tuple[frozenset[str], frozenset[str]]:
        """The names of the regular files and of the folders in ``folder`` (links followed; none
        where it cannot be listed), read once per index."""
        listed = self._listings.get(folder)
        if listed is None:
            files: set[str] = set()
            folders: set[str] = set()
            with contextlib.suppress(OSError), os.scandir(folder) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):  # a dangling link: neither
                        if entry.is_file():
                            files.add(entry.name)
                        elif entry.is_dir():
                            folders.add(entry.name)
            listed = self._listings[folder] = (frozenset(files), frozenset(folders))
        return listed

    def locate(self, importer: str, qualified: str) -> list[tuple[str, str]]:
        """:meth:`_locate`, remembered per importer folder and name."""
        key = (os.path.dirname(importer), qualified, importer)
        found = self._located.get(key)
        if found is None:
            found = self._located[key] = self._locate(importer, qualified)
        return found

    def _locate(self, importer: str, qualified: str) -> list[tuple[str, str]]:
        """(module file, attribute) candidates for the dotted ``qualified`` name an import of
        ``importer`` binds (``utils.AmpGradScaler`` → ``utils.py``, ``AmpGradScaler``); the
        longest module prefix first. Relative imports arrive without their dots
        (``ImportMap``): the importer's own folder is searched first."""
        parts = qualified.split(".")
        found: list[tuple[str, str]] = []
        folders = self._folders_for(importer, parts)
        for split in range(len(parts) - 1, 0, -1):
            for folder in folders:
                path = self.module_path(folder, parts[:split])
                if path is not None and self.root_of(path) is not None and os.path.abspath(path) != importer:
                    found.append((os.path.abspath(path), ".".join(parts[split:])))
            if found:
                break
        return found

    # --- loaded modules ----------------------------------------------------------------------
    def load(self, path: str) -> ModuleFunctions | None:
        """The functions of the project module at ``path`` (its LibCST tree parsed once per
        process, at most :data:`MAX_LOADED` kept); None when it cannot be read or parsed."""
        if path in self._loaded:
            self._loaded.move_to_end(path)
            entry = self._loaded[path]
            return entry.functions if entry is not None else None
        entry = self._parse(path)
        self._loaded[path] = entry
        while len(self._loaded) > 1 and (len(self._loaded) > MAX_LOADED or sum(
                loaded.size for loaded in self._loaded.values() if loaded is not None) > MAX_LOADED_BYTES):
            self._loaded.popitem(last=False)
        return entry.functions if entry is not None else None

    def importer_functions(self, path: str) -> tuple[ModuleFunctions, str] | None:
        """The functions of the module at ``path`` (an importer, see :meth:`importers`) and the
        SHA-256 of its bytes, with an empty record of the modules it reads. Its tree is parsed once
        per process while the file's ``stat`` signature holds, and is no copy :meth:`load` hands
        out; the functions hold no lookup, so they see the modules loaded when asked (see
        :meth:`standing_in`). None when it cannot be read or parsed."""
        text = self._text(path)
        if text is None:
            self._callers.pop(path, None)
            return None
        data, signature = text
        kept = self._callers.pop(path, None)
        entry = kept[1] if kept is not None and kept[0] == signature else self._model(path, data)
        self._callers[path] = (signature, entry)
        while len(self._callers) > 1 and (len(self._callers) > MAX_KEPT_IMPORTERS or sum(
                loaded.size for _, loaded in self._callers.values() if loaded is not None) > MAX_MODULE_BYTES):
            self._callers.popitem(last=False)
        if entry is None:
            return None
        entry.functions.project.used = {}  # type: ignore[union-attr]  # (the last run's went to its file)
        return entry.functions, entry.digest

    @contextlib.contextmanager
    def standing_in(self, path: str, functions: ModuleFunctions) -> Iterator[None]:
        """Inside the block, a lookup of the module at ``path`` finds ``functions`` (the checked
        file's own model, whose nodes its findings are placed on), not a copy parsed from disk."""
        key = os.path.abspath(path)
        previous = self._loaded.pop(key, None) if key in self._loaded else _ABSENT
        self._loaded[key] = _Loaded(functions, "", 0)
        try:
            yield
        finally:
            self._loaded.pop(key, None)
            if previous is not _ABSENT:
                self._loaded[key] = previous  # type: ignore[assignment]

    def digest_of(self, path: str) -> str | None:
        entry = self._loaded.get(path)
        return entry.digest if entry is not None else None

    def _parse(self, path: str) -> _Loaded | None:
        try:
            data, _ = read_source(path, MAX_MODULE_BYTES)  # an imported path may name a FIFO or a device
        except (OSError, NotARegularFile):
            return None
        return self._model(path, data)

    def _model(self, path: str, data: bytes) -> _Loaded | None:
        """The functions of the module at ``path`` whose bytes are ``data`` (None: over
        :data:`MAX_MODULE_BYTES`, or not parsed)."""
        from accumlint.files.reading import decode_source
        from accumlint.model.module_functions import ModuleFunctions
        from accumlint.pipeline.engine import parse_module  # the engine imports the model

        if len(data) > MAX_MODULE_BYTES:
            return None
        try:
            module = parse_module(decode_source(data))
        except (SyntaxError, UnicodeDecodeError, RecursionError, ValueError):
            return None
        except Exception:  # noqa: BLE001 - LibCST's parser error: the module is not followed
            return None
        return _Loaded(ModuleFunctions(module, ProjectView(self, path)), _digest(data), len(data))

    def view(self, path: str) -> ProjectView | None:
        """What the model of the file at ``path`` may follow (None: the file is in no root)."""
        return ProjectView(self, os.path.abspath(path)) if self.root_of(path) is not None else None

    # --- the prefilter ---------------------------------------------------------------------
    @staticmethod
    def names_of(data: bytes, vocabulary: Vocabulary | None = None) -> tuple[str, ...]:
        """The top-level functions and classes a module defines, when its code calls a
        backward (else none): what a call in another module may reach a backward through.
        ``vocabulary`` names the backward calls (None: the engine's, which loads LibCST)."""
        from accumlint.pipeline import byte_stage  # it imports this package

        if vocabulary is None:
            from accumlint.pipeline.engine import vocabulary as engine_vocabulary  # (LibCST)

            vocabulary = engine_vocabulary()
        if len(data) > MAX_MODULE_BYTES:
            return ()
        if not _needles().find_matches_as_indexes(data) or not (
                byte_stage.backward_used(data, vocabulary) or _GRADIENT_WORK.search(data)):
            # (the substring test first: most modules hold none, and it is one pass)
            return _follow_only_names(data) + _derived_classes(data, ())
        # only the top-level blocks (a def or class up to the next one) whose own code calls
        # one: a module of many classes names only the few that do
        # (a block that only computes a token loss is marked ``~``: worth following from a loop,
        # but no reason for a file that calls it to pass the prefilter)
        names = []
        bases: dict[str, set[str]] = {}  # class → the names its header derives from
        for name, block in _top_level_blocks(data):
            if _by_hand(block):
                names.append(name.decode())  # (a weight average or a gradient rescale written by hand)
            elif byte_stage.backward_used(block, vocabulary):
                performs = _performs_events(name, block, vocabulary)
                names.append(("" if performs else FOLLOW_ONLY) + name.decode())
            elif (header := _CLASS_BASES.match(block)) is not None:
                bases[name.decode()] = set(re.findall(r"[A-Za-z_]\w*", header.group(1).decode()))
        # a class that inherits its events from a base of this module (`class Manager(Base)`: the
        # caller writes `Manager(...)`, the update is in `Base.finish`) is worth following too
        performing = {name for name in names if not name.startswith(FOLLOW_ONLY)}
        for _ in range(4):
            more = {name for name, parents in bases.items() if parents & performing} - performing
            if not more:
                break
            performing |= more
            names.extend(sorted(more))
        return tuple(names) + _derived_classes(data, performing)

    def imported_modules(self, importer: str, data: bytes) -> list[str]:
        """The project modules (absolute paths, in no particular order) that the import
        statements in ``data``, the bytes of the file at ``importer``, bind: ``import a.b``,
        ``from a import b`` (module ``a/b.py`` or ``a.py``), ``from .x import y`` (the importer's
        folder first). Read from the bytes, so an import in a string counts too (a superset)."""
        return self.resolve_imports(importer, self.import_names(data))

    @staticmethod
    def import_names(data: bytes) -> tuple[str, ...]:
        """The dotted names the import statements in ``data`` may bind, in order, relative
        imports without their dots (``from .x import y`` → ``x.y``, ``x``): what
        :meth:`resolve_imports` looks up. Depends on the bytes alone (kept between runs)."""
        found: dict[str, None] = {}
        for match in _IMPORT.finditer(data):
            if match.group(5) is not None:
                names = [part.split()[0] for part in match.group(5).decode("ascii", "replace").split(",")
                         if part.split()]
            else:
                base = match.group(2).decode("ascii", "replace")
                bracketed = match.group(3)
                text = _COMMENT.sub(b"", bracketed) if bracketed is not None else match.group(4)
                listed = [part.split()[0] for part in text.decode("ascii", "replace").split(",") if part.split()]
                names = [f"{base}.{name}" if base else name for name in listed] + ([base] if base else [])
            found.update(dict.fromkeys(names))
        return tuple(found)

    def resolve_imports(self, importer: str, names: Sequence[str]) -> list[str]:
        """The project modules (absolute paths) that the :meth:`import_names` ``names`` of the
        file at ``importer`` bind, from its search folders (the file system is looked at now:
        a module added since the names were read counts)."""
        found: dict[str, None] = {}
        importer = os.path.abspath(importer)
        for name in names:
            parts = [part for part in name.split(".") if part]
            for folder in self._folders_for(importer, parts):
                path = next((p for k in range(len(parts), 0, -1) if (p := self.module_path(folder, parts[:k]))),
                            None)
                if path is not None and self.root_of(path) is not None and os.path.abspath(path) != importer:
                    found[os.path.abspath(path)] = None
                    break
        return list(found)

    def importers(self, path: str, mentioning: Sequence[str] = ()) -> list[str]:
        """The checked files whose imports bind the module at ``path`` (absolute paths, in the
        order checked) and, given ``mentioning``, whose bytes hold one of those names: the callers
        that may run its functions with facts it does not show. The import graph of the checked
        files is read once per process, when first asked."""
        if self._importers is None:
            graph: dict[str, list[str]] = {}
            for file in self.files[:MAX_SCANNED]:
                try:
                    data, _ = read_source(file, MAX_MODULE_BYTES)
                except (OSError, NotARegularFile):
                    continue
                for imported in self.imported_modules(file, data):
                    graph.setdefault(imported, []).append(file)
            self._importers = graph
        found = self._importers.get(os.path.abspath(path), [])
        if not mentioning:
            return found
        needles = [name.encode() for name in mentioning]
        kept = []
        for file in found:
            text = self._text(file)
            if text is not None and any(needle in text[0] for needle in needles):
                kept.append(file)
        return kept

    def _text(self, path: str) -> tuple[bytes, Signature] | None:
        """The bytes of the file at ``path`` (at most :data:`MAX_MODULE_BYTES` + 1) and the ``stat``
        signature they were read under: read once per process while a ``stat`` gives that
        signature (a write changes it), the last :data:`MAX_KEPT_TEXT_BYTES` kept. None: unreadable."""
        try:
            now = signature_of(os.stat(path))
        except OSError:
            return None
        kept = self._texts.pop(path, None)
        if kept is not None:
            self._text_bytes -= len(kept[0])
            if kept[1] != now:
                kept = None
        if kept is None:
            try:
                data, _, signature = read_signed(path, MAX_MODULE_BYTES)
            except (OSError, NotARegularFile):
                return None
            kept = (data, signature)
        self._texts[path] = kept
        self._text_bytes += len(kept[0])
        while len(self._texts) > 1 and self._text_bytes > MAX_KEPT_TEXT_BYTES:
            self._text_bytes -= len(self._texts.popitem(last=False)[1][0])
        return kept

    def set_names(self, names: dict[str, tuple[str, ...]]) -> None:
        """The :meth:`names_of` of every checked file (path → names), learned by the caller."""
        self._by_path = {os.path.abspath(path): found for path, found in names.items()}
        every = {name for found in resolve_derived(names).values() for name in found}
        self._names = frozenset(name.encode() for name in every if not name.startswith(FOLLOW_ONLY))
        self._followed = frozenset(name.lstrip(FOLLOW_ONLY).encode() for name in every)
        self._searches = {}
        self._reachable = _reachable_names(resolve_derived(self._by_path))

    def followed_names(self) -> frozenset[bytes]:
        """:meth:`event_names` and the names of blocks that compute a token loss or build an object
        that counts the microbatches (:data:`FOLLOW_ONLY`)."""
        if self._followed is None:
            names = self._scanned_names()
            self._followed = frozenset(name.lstrip(FOLLOW_ONLY).encode() for name in names)
        return self._followed

    def _scanned_names(self) -> set[str]:
        """Every name of the checked files (:meth:`names_of`, the derived classes resolved), read
        from the files where :meth:`set_names` was not called."""
        return {name for found in resolve_derived({path: self._names_at(path) for path in self.files[:MAX_SCANNED]})
                .values() for name in found}

    def _names_at(self, path: str) -> tuple[str, ...]:
        try:
            data, _ = read_source(path, MAX_MODULE_BYTES)
        except (OSError, NotARegularFile):
            return ()
        return self.names_of(data, self.vocabulary)

    def names_for(self, path: str) -> tuple[str, ...]:
        return getattr(self, "_by_path", {}).get(os.path.abspath(path), ())

    def state(self) -> str:
        """A digest of the project's names: a cached result decided under other names is stale."""
        return _digest(b"\0".join(sorted(self.event_names())) + b"\1" + b"\0".join(sorted(self.followed_names())))[:16]

    def event_names(self) -> frozenset[bytes]:
        """Top-level function and class names defined by the checked files whose code calls a
        backward: a call of one of them may run a backward (read once per run)."""
        if self._names is None:
            names = self._scanned_names()
            self._names = frozenset(name.encode() for name in names if not name.startswith(FOLLOW_ONLY))
        return self._names

    def reachable_event_names(self, path: str) -> frozenset[bytes]:
        """The :meth:`event_names` that the file at ``path`` can import: those of the modules
        an import resolved from its search folders (:meth:`search_paths`) may reach
        (:func:`_reachable_names`). Every name where :meth:`set_names` was not called."""
        if self._reachable is None:
            return self.event_names()
        found: set[bytes] = set()
        for folder in self.search_paths(path):
            found |= self._reachable.get(folder, frozenset())
        return frozenset(found)

    def mentions_event_name(self, data: bytes, path: str | None = None) -> bool:
        """Whether ``data`` holds a whole-word occurrence of an :meth:`event_names` name (in
        strings and comments too: a superset keeps the prefilter sound); with ``path``, of a
        name the file there can import (:meth:`reachable_event_names`)."""
        names = self.event_names() if path is None else self.reachable_event_names(path)
        if not names:
            return False
        search = self._searches.get(names)
        if search is None:
            from ahocorasick_rs import BytesAhoCorasick

            if len(self._searches) > 64:  # one per distinct set: a few per run
                self._searches.clear()
            search = self._searches[names] = BytesAhoCorasick(sorted(names))
        for _, start, end in search.find_matches_as_indexes(data, overlapping=True):  # type: ignore[attr-defined]
            before = data[start - 1:start]
            after = data[end:end + 1]
            if (not (before.isalnum() or before == b"_") and not (after.isalnum() or after == b"_")
                    and not _DEFINES.search(data, max(0, start - 12), start)):
                return True  # (a module's own `def f` is no use of another module's `f`)
        return False


def _derived_classes(data: bytes, performing: Collection[str]) -> tuple[str, ...]:
    """:data:`DERIVES` marks of the module's top-level classes outside ``performing`` that name bases."""
    found = []
    for match in _DERIVED.finditer(data):
        name = match.group(1).decode()
        bases = [re.findall(r"[A-Za-z_]\w*", part.split("[")[0])[-1:] for part in match.group(2).decode().split(",")
                 if "=" not in part]
        bases = [base[0] for base in bases if base and base[0] != "object"]
        if bases and name not in performing:
            found.append(f"{DERIVES}{name}:{','.join(bases)}")
    return tuple(found)


#: a top-level class header with its bases (``class PPOTrainer(rl_trainer.RLTrainer):``)
_DERIVED = re.compile(rb"^class[ \t]+([A-Za-z_]\w*)[ \t]*\(([^)]*)\)", re.M)


def resolve_derived(by_path: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """``by_path`` (path → :meth:`ProjectIndex.names_of`) with each :data:`DERIVES` mark resolved:
    a class one of whose bases is named by an event name of the project (its module's or another's,
    a few generations down) becomes an event name of its module; the other marks are dropped. By
    name alone, as the prefilter's names are: following a class too many costs a parse, never a finding."""
    performing = {name for found in by_path.values() for name in found if name[:1] not in (FOLLOW_ONLY, DERIVES)}
    marks = [(path, name, set(bases.split(","))) for path, found in by_path.items() for mark in found
             if mark.startswith(DERIVES) for name, bases in [mark[1:].split(":", 1)]]
    added: dict[str, list[str]] = {}
    for _ in range(4):  # generations
        more = [(path, name) for path, name, bases in marks if name not in performing and bases & performing]
        if not more:
            break
        for path, name in more:
            performing.add(name)
            added.setdefault(path, []).append(name)
    return {path: tuple(n for n in found if not n.startswith(DERIVES)) + tuple(added.get(path, ()))
            for path, found in by_path.items()}


def _follow_only_names(data: bytes) -> tuple[str, ...]:
    """The top-level blocks of a module that performs no event which build an object counting the
    microbatches (``def make_accelerator(cfg): return Accelerator(...)``), load a checkpoint
    (``def build_optimizer(cfg, model, resume): ... torch.load(resume) ... return opt, start_epoch``)
    or are functions named for a loss (``def compute_loss(model, batch, accum): return ... /
    accum``), marked :data:`FOLLOW_ONLY`: a loop that gets its accelerator or engine from one
    learns its A there, one that gets its start epoch from one learns that only a resumed run
    starts later, one that gets its loss from one learns its division and the forwards it comes
    from. (The simulator also follows a function of any project module that a call hands
    per-microbatch data and that may compute one; the reading of the code follows these.)"""
    calls = _builder_calls() + _checkpoint_calls()
    built = any(call in data for call in calls)
    if not built and LOSS_HELPER_NAME.search(data) is None:
        return ()
    return tuple(FOLLOW_ONLY + name.decode() for name, block in _top_level_blocks(data)
                 if built and any(call in block for call in calls)
                 or _FUNCTION.match(block) is not None and LOSS_HELPER_NAME.search(name) is not None)

_FUNCTION = re.compile(rb"(?:async[ \t]+)?def\b")


def _top_level_blocks(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Each top-level ``def``/``class`` of a module's bytes: its name and its block (up to the next one)."""
    matches = list(_TOP_LEVEL.finditer(data))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(data)
        yield match.group(1), data[match.start():end]


@functools.cache
def _builder_calls() -> tuple[bytes, ...]:
    """``Accelerator(``, ``initialize(``: :data:`accumlint.frameworks.COUNTER_BUILDER_NAMES` as a
    file's bytes show their calls (the framework tables are read when first needed)."""
    from accumlint.frameworks import COUNTER_BUILDER_NAMES

    return tuple(sorted(name.encode() + b"(" for name in COUNTER_BUILDER_NAMES))


@functools.cache
def _checkpoint_calls() -> tuple[bytes, ...]:
    """``torch.load(``: :data:`accumlint.frameworks.pytorch.CHECKPOINT_LOADS` as a file's bytes
    show their calls (the qualified spelling; a module that imports ``load`` by itself is not followed)."""
    from accumlint.frameworks.pytorch import CHECKPOINT_LOADS

    return tuple(sorted(name.encode() + b"(" for name in CHECKPOINT_LOADS))


@functools.cache
def _needles() -> BytesAhoCorasick:
    """One pass for all of :data:`_NEEDLES` (half the time of one ``in`` per needle)."""
    from ahocorasick_rs import BytesAhoCorasick

    return BytesAhoCorasick(list(_NEEDLES))


#: a top-level ``def``/``class`` (column 0): read from the bytes, no parse (a superset: a
#: string holding such a line adds a name, which only lets more files through the prefilter)
_TOP_LEVEL = re.compile(rb"^(?:async[ \t]+def|def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
#: the base list of a class header (``class Manager(Base, Mixin):`` → ``Base, Mixin``)
_CLASS_BASES = re.compile(rb"class[ \t]+\w+[ \t]*\(([^)]*)\)")


_DEFINES = re.compile(rb"(?:def|class)[ \t]+\Z")
#: an import statement's head: ``from (dots)(module) import names`` (the names in brackets may span
#: lines and hold comments) or ``import names``
_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(?:\(([^)]*)\)|([\w \t,]+))"
                     rb"|import[ \t]+([\w., \t]+))", re.M)
_COMMENT = re.compile(rb"#[^\n]*")
_CLOSERS = (b")", b"]", b"}")
#: the event calls a caller names in its own bytes to reach a block defined under that name
_EVENT_CALL_NAMES = (b"backward", b"manual_backward", b"zero_grad", b"clip_grad_norm", b"clip_grad_norm_",
                     b"clip_grad_value_", b"clip_gradients")
#: a method named like an event call (``def backward(self``, ``def zero_grad(self``)
_EVENT_METHOD = re.compile(rb"^([ \t]+)(?:async[ \t]+)?def[ \t]+(?:" + b"|".join(
    re.escape(name) for name in _EVENT_CALL_NAMES) + rb")\b", re.M)


def _event_methods(block: bytes) -> list[tuple[int, int]]:
    """The spans of a class's methods named like an event call (``Tensor.backward``,
    ``Module.zero_grad``), ``def`` line included: code that reaches one calls it by that name,
    a marker in the caller's own bytes, so such a method alone gives a caller no reason to
    pass the prefilter. Only a ``def`` in code counts (not one in a docstring); a body ends at
    the first non-blank line indented no deeper than its ``def`` (tabs to 8 columns, as the
    tokenizer counts): a line of a string or a bracket ends it early, never late, so a span
    never covers more than the method."""
    from accumlint.source.prefilter import code_offsets

    starts = code_offsets(block, [match.start(1) for match in _EVENT_METHOD.finditer(block)])
    spans: list[tuple[int, int]] = []
    for start in starts:
        line_start = block.rfind(b"\n", 0, start) + 1
        if spans and line_start < spans[-1][1]:
            continue  # inside a span already
        match = _EVENT_METHOD.match(block, line_start)
        assert match is not None
        indent = len(match.group(1).expandtabs(8))
        end = block.find(b"\n", match.end())
        while end != -1:
            line_end = block.find(b"\n", end + 1)
            line = block[end + 1:line_end if line_end != -1 else len(block)].rstrip(b"\r")
            stripped = line.lstrip(b" \t\f")
            if (stripped and stripped[:1] not in _CLOSERS
                    and len(line[:len(line) - len(stripped)].expandtabs(8)) <= indent):
                break  # (a line that starts with a closing bracket ends a signature, not the body)
            end = line_end
        spans.append((line_start, len(block) if end == -1 else end + 1))
    return spans


def _performs_events(name: bytes, block: bytes, vocabulary: Vocabulary) -> bool:
    """:func:`~accumlint.pipeline.byte_stage.performs_events` for a top-level block named ``name``: never
    for a function named like an event call (``torch.autograd.backward``: its callers name
    it); for a class, outside its :func:`_event_methods`."""
    from accumlint.source.prefilter import marker_search

    if name in _EVENT_CALL_NAMES and not block.startswith(b"class"):
        return False
    uses = marker_search(vocabulary.events).uses(block)
    if not uses or not block.startswith(b"class"):
        return bool(uses)
    spans = _event_methods(block)
    return any(not any(begin <= use < end for begin, end in spans) for use in uses)


def _reachable_names(names: dict[str, tuple[str, ...]]) -> dict[str, frozenset[bytes]]:
    """Folder → the event names (no :data:`FOLLOW_ONLY` ones) of the modules an import searched
    from that folder can reach. An import names a module by identifiers (``a.b`` →
    ``a/b.py`` or ``a/b/__init__.py``), so a module is reachable only from the folders above
    it up to the first one whose name is no identifier (``torch-2.13.0-wheel``): a file one
    level up cannot import it. What that module imports in turn is reachable from the same
    folders (its own folder, and its root between them and it), so one map covers the
    re-exports too."""
    reachable: dict[str, set[bytes]] = {}
    for path, found in names.items():
        events = [name.encode() for name in found if not name.startswith(FOLLOW_ONLY)]
        if not events:
            continue
        folder, stem = os.path.split(path)
        if not stem.endswith(".py") or not stem[:-3].isidentifier():
            continue  # `test-utils.py`: no import names it
        while True:
            reachable.setdefault(folder, set()).update(events)
            parent, name = os.path.split(folder)
            if parent == folder or not name.isidentifier():
                break
            folder = parent
    return {folder: frozenset(found) for folder, found in reachable.items()}


@dataclass
class ProjectView:
    """One file's window on the project: resolves its imports to project modules and records
    which project files its model read (``used``: path → SHA-256 of the bytes read)."""

    index: ProjectIndex
    path: str
    used: dict[str, str] = field(default_factory=dict)

    def lookup(self, importer: ModuleFunctions, qualified: str, depth: int = 0,
               any_module: bool = False) -> tuple[ModuleFunctions, cst.FunctionDef | cst.ClassDef] | None:
        """The project function or class the import-qualified name refers to, from the module
        ``importer`` (a re-export through a package ``__init__`` is followed a few levels).
        ``any_module``: also in a module that performs no training event (a rule's rare, targeted
        question, such as a dataset class's constructor)."""

        if depth > MAX_REEXPORT_DEPTH:
            return None
        origin = getattr(importer.project, "path", self.path)
        # only a name that a module performing events defines is worth a parse, and only a few
        # modules per checked file (each parse costs about as much as checking a file)
        if not any_module and qualified.rsplit(".", 1)[-1].encode() not in self.index.followed_names():
            return None
        limit = MAX_MODULE_BYTES
        limit_modules = MAX_FOLLOWED_MODULES + (MAX_ASKED_MODULES if any_module else 0)
        for path, attribute in self.index.locate(origin, qualified):
            if "." in attribute:
                continue  # `pkg.mod.Class.method`: not a top-level name
            try:
                if os.path.getsize(path) > limit:
                    continue
            except OSError:
                continue
            if path not in self.used and len(self.used) >= limit_modules:
                continue
            functions = self.index.load(path)
            if functions is None:
                continue
            digest = self.index.digest_of(path)
            if digest is not None:
                self.used[path] = digest
            found: cst.FunctionDef | cst.ClassDef | None = functions.classes.get(attribute)
            if found is None:
                candidate = functions.functions.get(attribute)
                if candidate is not None and functions.class_of.get(candidate) is None \
                        and functions.enclosing.get(candidate) is None:
                    found = candidate
            if found is not None:
                functions.project.used = self.used  # type: ignore[union-attr]  # one record per checked file
                return functions, found
            again = functions.imports.qualify(attribute)
            if again is not None and again != qualified:
                # a re-export (`utils/__init__.py`: `from .impl import f`): resolved from that module,
                # recorded here, so the result depends on `impl.py` as well as on the `__init__`
                result = self.lookup(functions, again, depth + 1, any_module)
                if result is not None:
                    return result
        return None
