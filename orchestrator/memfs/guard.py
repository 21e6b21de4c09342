"""What a git process reverie starts may read and run (A1): repository-local
configuration and layout are data, never code.

A model's ``bash`` can write the memory repository's ``.git`` (its commits need it), so it could
plant a ``commondir`` or a config that names a program every git reverie runs outside the sandbox
would then start. Two rules close that: the layout is checked, restored where safe or refused
(:class:`RepositoryRefused`), then pinned through ``GIT_DIR``/``GIT_COMMON_DIR``/``GIT_WORK_TREE``
(:func:`locate`); and every process gets overrides that outrank any config file, so configuration
cannot name a program (:func:`hardening`). Findings are one ``reverie: warning:`` line, kept until
:func:`drain_findings`. What is checked and overridden is in docs/architecture.md, "The git
guard"; why overrides rather than skipping config files, in docs/design.md under A1."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.memfs.errors import MemfsError

__all__ = [
    "Finding",
    "Layout",
    "Listing",
    "RepositoryRefused",
    "drain_findings",
    "hardening",
    "locate",
    "outer_environment",
    "parse_listing",
    "report",
    "require_checkout",
]

_FIXED: Final = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.askPass", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("protocol.ext.allow", "never"),
)
_FIXED_ENV: Final = {
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_ALLOW_PROTOCOL": "file:https:http:ssh",
}
_MERGE_FILE: Final = "git merge-file %A %O %B"
_HEADER: Final = re.compile(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\\n]|\\.)*)")?\s*\]\s*(?:[#;].*)?')
_KEY: Final = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:=.*)?")
_UNESCAPE: Final = re.compile(r"\\(.)")


class RepositoryRefused(MemfsError, RuntimeError):
    """A repository whose ``.git`` was redirected or planted in a way reverie cannot undo safely;
    ``str()`` is one line naming the file and the fix. No git process was started."""


@dataclass(frozen=True)
class Finding:
    """Something wrong with a repository's layout or config: restored (``restored``) or refused."""

    repository: Path
    message: str
    restored: bool


@dataclass(frozen=True)
class Layout:
    """A checked repository: its work tree, git folder and common git folder, all resolved."""

    top: Path
    git_dir: Path
    common_dir: Path

    @property
    def linked(self) -> bool:
        return self.git_dir != self.common_dir

    def environment(self) -> dict[str, str]:
        """The location variables that make git use exactly this layout."""
        return {"GIT_DIR": str(self.git_dir), "GIT_COMMON_DIR": str(self.common_dir), "GIT_WORK_TREE": str(self.top)}


_findings: list[Finding] = []
_KEPT: Final = 256
_findings_lock = threading.Lock()


def report(repository: Path, message: str, *, restored: bool) -> None:
    """Print ``message`` as one ``reverie: warning:`` line and keep it for :func:`drain_findings`
    (for the repairs of other memfs modules too: stale locks, a rebuilt index)."""
    _report(Finding(Path(os.path.realpath(repository)), message, restored))


def _report(finding: Finding) -> None:
    with _findings_lock:
        if len(_findings) >= _KEPT:
            del _findings[0]  # nobody drains them (a command without a turn): keep the newest
        _findings.append(finding)
    sys.stderr.write(f"reverie: warning: {finding.message}\n")
    sys.stderr.flush()


def drain_findings(repository: Path | None = None) -> tuple[Finding, ...]:
    """The findings reported since the last drain (those under ``repository`` only, when given)."""
    with _findings_lock:
        if not _findings:
            return ()  # the post-turn check of every turn: no ``realpath`` (an ``lstat`` per component)
        if repository is None:
            taken, _findings[:] = list(_findings), []
            return tuple(taken)
        root = Path(os.path.realpath(repository))
        taken = [f for f in _findings if f.repository == root or f.repository.is_relative_to(root)]
        _findings[:] = [f for f in _findings if f not in taken]
        return tuple(taken)


# ---------------------------------------------------------------------------------------------
# The layout
# ---------------------------------------------------------------------------------------------


def locate(start: Path | str) -> Layout | None:
    """The checked layout of the repository holding ``start`` (the nearest ``.git`` above it), or
    None when there is none. Restores what is safe (a finding), else raises
    :class:`RepositoryRefused`. Blocking: two or three ``lstat`` calls for a repository seen before
    (this runs before every git process, so paths stay strings and the resolved layout is kept)."""
    folder = os.path.abspath(start)
    while True:
        dotgit = os.path.join(folder, ".git")
        try:
            st = os.lstat(dotgit)
        except FileNotFoundError:
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent
            continue
        except OSError:
            return None
        return _checked(folder, st)


_layouts: dict[tuple[str, int, int, int], Layout] = {}


def _checked(folder: str, st: os.stat_result) -> Layout:
    if _is_link(st.st_mode):
        raise RepositoryRefused(f"{os.path.realpath(folder)}: .git is a symbolic link; reverie runs no git in a redirected repository")
    key = (folder, st.st_dev, st.st_ino, st.st_mtime_ns if not _is_dir(st.st_mode) else 0)
    known = _layouts.get(key)
    if known is not None and not known.linked:
        _check_main(known.top, known.git_dir)
        return known
    top = Path(os.path.realpath(folder))
    if _is_dir(st.st_mode):
        git_dir = top / ".git"
        _check_main(top, git_dir)
        layout = Layout(top, git_dir, git_dir)
    else:
        layout = _check_linked(top, top / ".git")
    if len(_layouts) > 1024:
        _layouts.clear()
    _layouts[key] = layout
    return layout


def require_checkout(top: Path) -> None:
    """Refuse a memory repository whose ``.git`` is not a folder (reverie makes one, never a
    ``.git`` file: a file there was put in place of the repository)."""
    dotgit = top / ".git"
    try:
        mode = os.lstat(dotgit).st_mode
    except FileNotFoundError:
        return
    if not _is_dir(mode):
        raise _refused(
            top,
            f"{top}: .git is not the repository's own folder (it was replaced by a "
            f"{'link' if _is_link(mode) else 'file'}); reverie runs no git there: move the original "
            ".git folder back",
        )


def _is_dir(mode: int) -> bool:
    return mode & 0o170000 == 0o040000


def _is_link(mode: int) -> bool:
    return mode & 0o170000 == 0o120000


def _refused(top: Path, message: str) -> RepositoryRefused:
    _report(Finding(top, message, restored=False))
    return RepositoryRefused(message)


def _check_main(top: Path, git_dir: Path) -> None:
    if os.path.lexists(f"{git_dir}/commondir"):
        planted = git_dir / "commondir"
        try:
            target = planted.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            target = "?"
        if not all((git_dir / part).exists() for part in ("HEAD", "objects", "refs")):
            raise _refused(top, f"{planted} points git at {target!r} and the repository has no HEAD, objects and refs of its own; reverie runs no git there")
        try:
            planted.unlink()
        except OSError as error:
            raise _refused(top, f"{planted} points git at {target!r} and cannot be removed ({error.strerror}); remove it") from None
        _report(Finding(top, f"{top}: removed a planted .git/commondir that pointed git at {target!r}; nothing it names was run", restored=True))
    _check_alternates(top, git_dir)


def _check_alternates(top: Path, common: Path) -> None:
    if os.path.lexists(f"{common}/objects/info/alternates"):
        alternates = common / "objects" / "info" / "alternates"
        raise _refused(
            top,
            f"{alternates} borrows objects from another repository, which reverie does not allow in memory; "
            f"run `git -C {top} repack -a -d` and then remove that file",
        )


def _check_linked(top: Path, dotgit: Path) -> Layout:
    """A linked worktree: ``.git`` says ``gitdir: <C>/worktrees/<name>``, whose ``commondir`` leads
    back to ``C``, the ``.git`` folder of a checkout."""
    try:
        text = dotgit.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise _refused(top, f"{dotgit}: unreadable .git file; reverie runs no git there") from None
    if not text.startswith("gitdir:"):
        raise _refused(top, f"{dotgit}: not a git pointer file; reverie runs no git there")
    pointer = Path(text.removeprefix("gitdir:").strip())
    git_dir = Path(os.path.realpath(pointer if pointer.is_absolute() else top / pointer))
    common = git_dir.parent.parent
    if git_dir.parent.name != "worktrees" or common.name != ".git" or not _is_checkout_git_dir(common):
        raise _refused(top, f"{dotgit} leads to {git_dir}, which is not a worktree record of a repository; reverie runs no git there")
    record = git_dir / "commondir"
    try:
        said = record.read_text(encoding="utf-8").strip()
    except OSError:
        said = ""
    named = Path(said)
    if not said or Path(os.path.realpath(named if named.is_absolute() else git_dir / named)) != common:
        try:
            _write_text(record, "../..\n")
        except OSError as error:
            raise _refused(top, f"{record} points git at {said!r} and cannot be restored ({error.strerror})") from None
        _report(Finding(top, f"{top}: restored {record} (it pointed git at {said!r} instead of {common})", restored=True))
    _check_main(common.parent, common)
    return Layout(top, git_dir, common)


def _is_checkout_git_dir(common: Path) -> bool:
    try:
        return _is_dir(os.lstat(common).st_mode) and os.path.samefile(common, common.parent / ".git")
    except OSError:
        return False


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# The configuration
# ---------------------------------------------------------------------------------------------

Listing = Callable[[Layout | None], Iterable[tuple[str, str]]]
"""``(scope, key)`` of every setting git reads for a layout, as ``git config --list --show-scope``."""

_Signature = tuple[tuple[int, int, int] | None, ...]
_cache: dict[tuple[object, ...], dict[str, str]] = {}
_cache_lock = threading.Lock()
_OUTER_FILES: dict[tuple[str | None, ...], list[str]] = {}
_OUTER_VARIABLES: Final = ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_COUNT")


def hardening(layout: Layout | None, listing: Listing) -> dict[str, str]:
    """The environment that overrides every setting able to run a program (module docstring):
    ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n`` after any the caller already has, plus the fixed
    variables. ``listing`` is asked only when a config file cannot be read here (an include in the
    user's own files). Raises :class:`RepositoryRefused` for an include in the repository's config.
    Kept per change of any config file: a few ``stat`` calls per git process."""
    outer = tuple(map(os.environ.get, _OUTER_VARIABLES))
    outer_files = _OUTER_FILES.get(outer)
    if outer_files is None:
        outer_files = _OUTER_FILES[outer] = [path for _, path in _outer_files()]
    files = [*outer_files, *(path for _, path in _repository_files(layout))]
    key = (None if layout is None else layout.git_dir, outer, tuple(_stat(path) for path in files))
    with _cache_lock:
        found = _cache.get(key)
    if found is None:
        found = _environment(_overrides(layout, files, listing))
        with _cache_lock:
            if len(_cache) > 512:
                _cache.clear()
            _cache[key] = found
    return dict(found)


def _environment(overrides: tuple[tuple[str, str], ...]) -> dict[str, str]:
    env = dict(_FIXED_ENV)
    start = _count(os.environ.get("GIT_CONFIG_COUNT"))
    for n, (name, value) in enumerate((*_FIXED, *overrides), start=start):
        env[f"GIT_CONFIG_KEY_{n}"] = name
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    env["GIT_CONFIG_COUNT"] = str(start + len(_FIXED) + len(overrides))
    return env


def _count(raw: str | None) -> int:
    try:
        return max(0, int(raw or "0"))
    except ValueError:
        return 0


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _outer_files() -> list[tuple[str, str]]:
    files: list[tuple[str, str]] = []
    if not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        files.append(("system", os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"))
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        files.append(("global", os.environ["GIT_CONFIG_GLOBAL"]))
    else:
        home = os.environ.get("HOME") or os.path.expanduser("~")
        xdg = os.environ.get("XDG_CONFIG_HOME") or f"{home}/.config"
        files.append(("global", f"{xdg}/git/config"))
        files.append(("global", f"{home}/.gitconfig"))
    return files


def _repository_files(layout: Layout | None) -> list[tuple[str, str]]:
    if layout is None:
        return []
    return [("local", f"{layout.common_dir}/config"), ("worktree", f"{layout.git_dir}/config.worktree")]


def _overrides(layout: Layout | None, files: list[str], listing: Listing) -> tuple[tuple[str, str], ...]:
    keys: list[tuple[str, str]] = []
    need_git = False
    for scope, path in (*_outer_files(), *_repository_files(layout)):
        parsed = _read_keys(Path(path))
        if parsed is None:
            if scope in ("local", "worktree"):
                _refuse_unreadable(layout, Path(path))
            need_git = True
            continue
        if scope in ("local", "worktree"):
            _refuse_includes(layout, Path(path), parsed)
        elif any(name.startswith(("include.", "includeif.")) for name in parsed):
            need_git = True
        keys.extend((scope, name) for name in parsed)
    if need_git:
        keys = list(listing(layout))
    return _neutral(keys)


def _refuse_unreadable(layout: Layout | None, path: Path) -> None:
    top = layout.top if layout is not None else path.parent
    raise _refused(top, f"{path}: a config file reverie cannot read safely (continued lines or unusual syntax); rewrite it with `git config`")


def _refuse_includes(layout: Layout | None, path: Path, names: Iterable[str]) -> None:
    for name in names:
        lowered = name.lower()
        if lowered.startswith(("include.", "includeif.")) and lowered.endswith(".path"):
            top = layout.top if layout is not None else path.parent
            raise _refused(
                top,
                f"{path} includes another file ({name}), which could name a program for git to run; "
                f"reverie runs no git there: remove it with `git -C {top} config --local --unset-all {name}`",
            )


def _neutral(keys: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for scope, name in keys:
        section, sub, key = _split(name)
        if section == "filter" and sub is not None and key in ("clean", "smudge", "process", "required"):
            for part, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")):
                out[f"filter.{sub}.{part}"] = value
        elif section == "merge" and sub is not None and key == "driver":
            out[f"merge.{sub}.driver"] = _MERGE_FILE
        elif scope in ("local", "worktree"):
            if (section, key) == ("core", "sshcommand"):
                out["core.sshCommand"] = "ssh"
            elif section == "remote" and sub is not None and key in ("uploadpack", "receivepack"):
                out[f"remote.{sub}.{key}"] = f"git-{'upload' if key == 'uploadpack' else 'receive'}-pack"
            elif section == "credential" and key == "helper":
                out["credential.helper"] = ""
    return tuple(out.items())


def _split(name: str) -> tuple[str, str | None, str]:
    """``section.sub.key`` as git prints it: section and key lower-case, the subsection as is."""
    section, _, rest = name.partition(".")
    sub, dot, key = rest.rpartition(".")
    return section.lower(), (sub if dot else None), key.lower()


def _read_keys(path: Path) -> list[str] | None:
    """The keys a config file sets, as git prints them; [] when it does not exist; None when it
    holds what this reader does not follow (an include, continued lines, unusual syntax)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    names: list[str] = []
    prefix: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            return None
        if line.startswith("["):
            header = _HEADER.fullmatch(line)
            if header is None:
                return None
            section, sub = header.group(1), header.group(2)
            if sub is not None:
                prefix = section.lower() + "." + _UNESCAPE.sub(lambda m: m.group(1), sub)
            elif "." in section:
                head, _, legacy = section.partition(".")
                prefix = f"{head.lower()}.{legacy.lower()}"
            else:
                prefix = section.lower()
            continue
        found = _KEY.fullmatch(line)
        if found is None or prefix is None:
            return None
        names.append(f"{prefix}.{found.group(1).lower()}")
    return names


def parse_listing(raw: bytes) -> list[tuple[str, str]]:
    """``git config --list --show-scope -z`` output as ``(scope, key)`` pairs."""
    fields = raw.split(b"\0")
    pairs: list[tuple[str, str]] = []
    for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
        key = entry.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        pairs.append((scope.decode("ascii", "replace"), key))
    return pairs


def outer_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what git never needs and a payload must never see: API keys."""
    return {name: value for name, value in environ.items() if not _API_KEY.search(name)}


_API_KEY: Final = re.compile(r"API_?KEY", re.IGNORECASE)
