"""The cache file and a run's replay of it: ``ReplayCache`` (the recordings and answers of a file,
read only when its owner's, written atomically under a lock, merged with other writers') and
``StepReplay`` (one run's matching of recorded steps in order, and the steps it records)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..actions import Answer
from ..errors import InputError
from ..files.disk import write_atomic
from ..records import Acted, Fingerprint, Step
from .views import CachedAnswer, CachedStep, origin_of, same_view, sensitive

__all__ = ["MAX_ANSWERS_PER_KEY", "ReplayCache", "StepReplay"]

log = structlog.get_logger("webagent.replay")

#: Answers kept per check or extraction key (one per page state it was asked on, the newest last).
MAX_ANSWERS_PER_KEY = 8


class _Recording(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    goal: str
    expect: str | None = None
    steps: list[CachedStep]


class _CacheFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    checks: dict[str, _Recording] = Field(default_factory=dict)
    answers: dict[str, list[CachedAnswer]] = Field(default_factory=dict)


class StepReplay:
    """The replay state of one run: matches recorded steps in order and records the new ones.
    ``origin``: the run's start origin (a step leaving it is not replayed: ``sensitive``)."""

    def __init__(self, recorded: list[CachedStep] | None = None, *, origin: str = "") -> None:
        self.recorded = list(recorded or [])
        self.origin = origin
        self.replaying = bool(self.recorded)
        self._pos = 0
        self.replayed = 0
        self.replanned = 0
        self.calls_saved = 0
        self._steps: list[CachedStep] = []

    def lookup(self, seen: Fingerprint, *, max_actions: int = 1) -> CachedStep | None:
        """The recorded step for this observation, or None (and no more replaying) on a mismatch or
        a step the policy must decide (``sensitive``; ``max_actions``: the actions one turn may take)."""
        if not self.replaying:
            return None
        if self._pos < len(self.recorded) and same_view(self.recorded[self._pos].fingerprint, seen):
            cached = self.recorded[self._pos]
            why = sensitive(cached, self.origin, max_actions=max_actions)
            if why is None:
                self._pos += 1
                return cached
            self.replaying = False  # the policy decides this step, and every one after it
            log.info("replay_stopped", position=self._pos, action=cached.action.action, why=why)
            return None
        self.replaying = False
        log.info("replay_mismatch", position=self._pos, recorded=len(self.recorded), url=seen.url)
        return None

    def observe(self, step: Step) -> None:
        """Account a finished step and keep it for the new recording if it worked."""
        if step.replayed:
            self.replayed += 1
        else:
            self.replanned += 1
        action = step.action
        if step.fingerprint is None or action is None or step.error is not None:
            return
        if isinstance(action, Answer) and not (step.verdict and step.verdict.success):
            return
        carried = [a for a in step.actions[1:] if not a.outcome.startswith("not carried out")]
        cached = CachedStep(
            fingerprint=step.fingerprint,
            action=action,
            point=step.point,
            target_point=step.target_point,
            more=[Acted(action=a.action, point=a.point, target_point=a.target_point) for a in carried],
            note=step.note,
            verdict=step.verdict,
        )
        if step.replayed:
            self.calls_saved += cached.calls
        self._steps.append(cached)

    @property
    def changed(self) -> bool:
        return self.replanned > 0

    @property
    def steps(self) -> list[CachedStep]:
        return list(self._steps)


class ReplayCache:
    """A cache file of recordings keyed by check name. Missing file = empty cache (record mode)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._data = self._load()
        self.updated: list[str] = []
        #: The keys this process changed (its recordings, its answers): what a write merges in.
        self._changed: set[tuple[str, str]] = set()

    def _load(self) -> _CacheFile:
        try:
            text = _read_trusted(self.path)
        except FileNotFoundError:
            return _CacheFile()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the replay cache {self.path}: {exc}") from None
        try:
            return _CacheFile.model_validate_json(text)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "top level"
            raise InputError(
                f"the replay cache {self.path} is not valid ({where}: {err['msg']}); "
                "fix it or delete it to record a new one"
            ) from None

    def replay_for(
        self, key: str, *, goal: str, url: str, expect: str | None = None, any_origin: bool = False
    ) -> StepReplay:
        """The replay of one check starting at ``url``; a recording made for another goal or
        expectation is ignored, and so is one made from another origin (scheme, host, port) than
        ``url``'s, unless ``any_origin`` (the operator's opt-in: the same suite against another
        host, fingerprints holding same-origin URLs as paths)."""
        origin = origin_of(url)
        rec = self._data.checks.get(key)
        if rec is None or (rec.goal, rec.expect) != (goal, expect):
            return StepReplay(origin=origin)
        if not any_origin and origin_of(rec.url) != origin:
            log.info("replay_other_origin", key=key, recorded=origin_of(rec.url), now=origin)
            return StepReplay(origin=origin)
        return StepReplay(rec.steps, origin=origin)

    def update(
        self,
        key: str,
        replay: StepReplay,
        *,
        url: str,
        goal: str,
        expect: str | None = None,
        redact: Callable[[CachedStep], CachedStep] | None = None,
    ) -> bool:
        """Store a successful run's steps if they differ from the recording; returns whether it did.

        ``redact`` cleans each step first (a secret a model echoed in a note must not be committed).
        """
        if not replay.changed or not replay.steps:
            return False
        steps = [redact(s) for s in replay.steps] if redact is not None else replay.steps
        self._data.checks[key] = _Recording(url=url, goal=goal, expect=expect, steps=steps)
        self.updated.append(key)
        self._changed.add(("checks", key))
        self.save()
        return True

    def answer_for(self, key: str, seen: Fingerprint, *, url: str, any_origin: bool = False) -> CachedAnswer | None:
        """The answer kept for ``key`` on a page state matching ``seen`` of ``url``'s origin (any
        origin with ``any_origin``), if any."""
        origin = origin_of(url)
        return next(
            (
                a
                for a in reversed(self._data.answers.get(key, []))
                if same_view(a.fingerprint, seen) and (any_origin or a.origin == origin)
            ),
            None,
        )

    def store_answer(self, key: str, seen: Fingerprint, value: Any, *, url: str) -> bool:
        """Keep an answer (JSON) for ``key`` on the page state ``seen`` of ``url``; returns whether
        the file changed."""
        origin = origin_of(url)
        kept = self._data.answers.setdefault(key, [])
        same = [a for a in kept if same_view(a.fingerprint, seen) and a.origin == origin]
        if any(a.value == value for a in same):
            return False
        kept[:] = [a for a in kept if a not in same][-(MAX_ANSWERS_PER_KEY - 1) :]
        kept.append(CachedAnswer(fingerprint=seen, value=value, origin=origin))
        self.updated.append(key)
        self._changed.add(("answers", key))
        self.save()
        return True

    def save(self) -> None:
        """Write this process's changes into the file as it is now (another process may have
        written its own since this one read it)."""
        with _locked(self.path.parent):
            current = self._load()
            for member, key in self._changed:
                mine, theirs = getattr(self._data, member), getattr(current, member)
                theirs[key] = mine[key]
            self._data = current
            self._write()

    def refresh(self) -> list[str]:
        """Read the file again (others wrote to it: the actors of a suite run on Ray); the keys
        whose recording or answers changed are added to ``updated`` and returned."""
        before, self._data = self._data, self._load()
        changed = [
            key
            for member in ("checks", "answers")
            for key, value in getattr(self._data, member).items()
            if getattr(before, member).get(key) != value
        ]
        self.updated += [key for key in dict.fromkeys(changed) if key not in self.updated]
        return changed

    def _write(self) -> None:
        # No "answers" member in a file without any: suites' caches stay as they were.
        exclude = None if self._data.answers else {"answers"}
        data = self._data.model_dump(mode="json", exclude_defaults=False, exclude=exclude)
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        write_atomic(self.path, text, private=True)  # 0600: code-equivalent, its owner's to change

    def keys(self) -> list[str]:
        return sorted(self._data.checks)


def _read_trusted(path: Path) -> str:
    """The text of a cache file its reader may trust: owned by the user (or root) and writable by no
    one else (InputError, one line, otherwise: another local user could make the agent replay
    anything). The open file is checked, not the name (a link is followed, its target checked)."""
    with path.open("rb") as fh:
        info = os.fstat(fh.fileno())
        if info.st_uid not in (os.getuid(), 0):
            raise InputError(
                f"the replay cache {path} belongs to another user (uid {info.st_uid}); a cache is replayed as the "
                "agent's own actions: review it, then copy it to a file of yours"
            )
        if stat.S_IMODE(info.st_mode) & 0o022:
            raise InputError(
                f"the replay cache {path} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}); a cache is "
                f"replayed as the agent's own actions: review it, then chmod 600 {path}"
            )
        return fh.read().decode("utf-8")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock of ``directory`` (between processes; none where the file system has no locks)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing it releases the lock
