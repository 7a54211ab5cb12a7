"""``HarSink``: the run's network as ``network.har`` in its directory (``[run] har = true``), the
HTTP Archive Playwright records of the run's context (``record_har_path``, bodies embedded), so
that an evaluator can read what the pages sent and received (WebArena-Verified style) and
Playwright's own ``route_from_har`` can replay the run's pages.

Playwright writes the archive when the context closes, into a private temporary folder; the sink
then writes it to the run directory with webagent's secret values (and a signed-in state's) as
``{{NAME}}`` wherever they appear, bodies and URLs included, and the values of the ``Cookie``,
``Set-Cookie``, ``Authorization`` and ``Proxy-Authorization`` headers and of every cookie replaced
by ``REDACTED``. Only for a context of the run's own: a caller's is open already."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import structlog

from ..files.disk import write_atomic
from ..guard.secrets import Secrets
from ..runtime import RunSpec
from .sink import RunSink

__all__ = ["HAR_NAME", "REDACTED", "HarSink", "redact_har"]

log = structlog.get_logger("webagent.record")

HAR_NAME = "network.har"
REDACTED = "REDACTED"
#: Headers whose values are credentials whatever they hold.
_SECRET_HEADERS = frozenset({"cookie", "set-cookie", "authorization", "proxy-authorization"})


class HarSink(RunSink):
    """Has the run's context record a HAR; writes it, redacted, to ``directory/network.har``."""

    def __init__(self, directory: Path, secrets: Secrets, *, private: bool = False) -> None:
        self.directory = directory
        self.secrets = secrets
        self.private = private
        self._scratch = Path(tempfile.mkdtemp(prefix="webagent-har-"))  # 0700: the raw archive holds secrets
        self.raw = self._scratch / HAR_NAME
        #: Where the redacted archive was written (None until the context has closed).
        self.path: Path | None = None
        #: The run was fenced (set aside for a re-run in its directory): its archive is not written.
        self.fenced = False

    def prepare(self, spec: RunSpec) -> RunSpec:
        return dataclasses.replace(spec, har_path=self.raw)

    async def closed(self) -> None:
        try:
            if not self.raw.exists():  # the context never opened, or its closing did not end
                log.warning("har_not_written", directory=str(self.directory))
                return
            try:
                har = json.loads(self.raw.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("har_unreadable", error=str(exc))
                return
            if self.fenced:  # checked with no await before the write: nothing lands after a fence
                log.warning("har_not_written_fenced", directory=str(self.directory))
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / HAR_NAME
            write_atomic(path, json.dumps(redact_har(har, self.secrets), indent=1) + "\n", private=self.private)
            self.path = path
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)

    async def fence(self, timeout_s: float) -> bool:
        self.fenced = True  # written in one go on the loop (``closed``): nothing begun is left going
        return True

    def __del__(self) -> None:  # a recorder dropped before its context closed leaves no raw archive behind
        shutil.rmtree(self._scratch, ignore_errors=True)


def redact_har(har: Any, secrets: Secrets) -> Any:
    """``har`` with credential headers' and cookies' values replaced by ``REDACTED`` and every
    secret value redacted from every string (a base64 text body decoded, redacted, encoded again)."""
    entries = har.get("log", {}).get("entries", []) if isinstance(har, dict) else []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        for side in ("request", "response"):
            message = entry.get(side)
            if not isinstance(message, dict):
                continue
            for header in message.get("headers", []) or []:
                if isinstance(header, dict) and str(header.get("name", "")).lower() in _SECRET_HEADERS:
                    header["value"] = REDACTED
            for cookie in message.get("cookies", []) or []:
                if isinstance(cookie, dict):
                    cookie["value"] = REDACTED
            content = message.get("content")
            if isinstance(content, dict) and content.get("encoding") == "base64" and secrets:
                content["text"] = _redact_base64(content.get("text"), secrets)
    return _redact_strings(har, secrets) if secrets else har


def _redact_base64(text: object, secrets: Secrets) -> object:
    if not isinstance(text, str):
        return text
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return text  # a binary body: an image, a font
    redacted = secrets.redact(decoded)
    return text if redacted == decoded else base64.b64encode(redacted.encode()).decode()


def _redact_strings(value: Any, secrets: Secrets) -> Any:
    if isinstance(value, str):
        return secrets.redact(value)
    if isinstance(value, list):
        return [_redact_strings(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: _redact_strings(v, secrets) for k, v in value.items()}
    return value
