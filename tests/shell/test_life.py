"""The background process's life and walls: it outlives the caller, a profile in use is refused, a
``kill -9`` leaves nothing that blocks the next start, the socket is its owner's only (another user
can neither reach it nor, were its permissions loosened, be answered), no TCP port listens, and bad
input is one line with exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from ..procs import descendants
from .conftest import Shell

pytestmark = pytest.mark.e2e

NOBODY = 65534


def listening_inodes() -> set[str]:
    """The inodes of every TCP socket in LISTEN state (IPv4 and IPv6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                found.add(fields[9])
    return found


def socket_inodes(pid: int) -> set[str]:
    found: set[str] = set()
    with_fds = Path(f"/proc/{pid}/fd")
    for fd in with_fds.iterdir() if with_fds.exists() else []:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def test_the_session_outlives_its_caller_and_no_port_listens(shell: Shell, shop_url: str) -> None:
    assert shell("session", "start", "--url", f"{shop_url}/login", *shell.flags()).returncode == 0
    pid = shell.daemon_pid()
    assert pid is not None
    assert os.getsid(pid) == pid  # a session of its own: the shell that started it may go
    assert shell("session", "snap").stdout.startswith('@e1 textbox "User"')
    processes = [pid, *descendants(pid)]
    assert len(processes) > 1  # Chromium runs under it
    held = set().union(*(socket_inodes(p) for p in processes))
    assert held and not (held & listening_inodes())  # neither it nor Chromium listens on TCP
    for p in processes:
        cmdline = Path(f"/proc/{p}/cmdline").read_bytes()
        assert b"--remote-debugging-port" not in cmdline  # Playwright's pipe only
    directory, sock = shell.directory.stat(), (shell.directory / "daemon.sock").stat()
    assert stat.S_IMODE(directory.st_mode) == 0o700 and stat.S_IMODE(sock.st_mode) == 0o600


def _connect_as_nobody(path: Path) -> str:
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "s.settimeout(10)\n"
        "try:\n"
        f"    s.connect({str(path)!r})\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__); sys.exit(0)\n"
        "try:\n"
        '    s.sendall(b\'{"command":"list"}\\n\')\n'
        "    data = s.recv(1000)\n"
        "except OSError:\n"
        "    data = b''\n"
        "print('answered' if data else 'unanswered')\n"
    )
    done = subprocess.run(["/usr/bin/python3", "-c", code], user=NOBODY, capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_another_user_can_neither_reach_nor_be_answered(shell: Shell, shop_url: str) -> None:
    assert shell("session", "start", *shell.flags()).returncode == 0
    path = shell.directory / "daemon.sock"
    assert _connect_as_nobody(path) == "refused PermissionError"  # the 0700 directory
    os.chmod(shell.directory, 0o711)  # loosened by mistake: the peer check still holds
    os.chmod(path, 0o666)
    try:
        assert _connect_as_nobody(path) == "unanswered"  # closed unread
    finally:
        os.chmod(shell.directory, 0o700)
        os.chmod(path, 0o600)
    assert shell("session", "list").returncode == 0  # its owner is answered


def test_kill_9_leaves_no_socket_that_blocks_the_next_start(shell: Shell, shop_url: str) -> None:
    assert shell("session", "start", "--url", f"{shop_url}/login", *shell.flags()).returncode == 0
    pid = shell.daemon_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes().lower():
            break
        time.sleep(0.05)
    assert (shell.directory / "daemon.sock").exists()  # left behind
    gone = shell("session", "snap")
    assert gone.returncode == 2 and "no open session" in gone.stderr
    again = shell("session", "start", "--url", f"{shop_url}/login", *shell.flags())
    assert again.returncode == 0, again.stderr
    assert shell.daemon_pid() not in (None, pid)


def test_a_profile_in_use_is_refused_in_one_line_and_keeps_the_sign_in(
    shell: Shell, shop_url: str, tmp_path: Path
) -> None:
    profile = tmp_path / "profile"
    first = shell(
        "session", "--session", "a", "start", "--url", f"{shop_url}/login", "--profile", str(profile), *shell.flags()
    )
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(profile.stat().st_mode) == 0o700
    second = shell(
        "session", "--session", "b", "start", "--url", f"{shop_url}/login", "--profile", str(profile), *shell.flags()
    )
    assert second.returncode == 2 and second.stderr.count("\n") == 1 and "in use" in second.stderr, second.stderr
    for args in (["type", "@e1", "alice"], ["secret", "@e2", "PASSWORD"], ["click", "@e3"]):
        shell("session", "--session", "a", "snap")
        assert shell("session", "--session", "a", *args).returncode == 0
    assert shell("session", "--session", "a", "close").returncode == 0
    again = shell(
        "session", "--session", "c", "start", "--url", f"{shop_url}/items", "--profile", str(profile), *shell.flags()
    )
    assert again.returncode == 0 and "Items" in again.stdout, again  # still signed in
    state = profile / "state.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600


def test_bad_input_is_one_line_and_exit_2(shell: Shell, shop_url: str, tmp_path: Path) -> None:
    def bad(*args: str) -> str:
        done = shell("session", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stdout == "" and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        return done.stderr

    assert "no open session 'nope'" in bad("--session", "nope", "snap")
    assert shell("session", "start", "--url", f"{shop_url}/login", *shell.flags()).returncode == 0
    assert "no open session 'nope'" in bad("--session", "nope", "click", "@e1")
    assert "unknown ref @e99" in bad("click", "@e99")
    assert "not a ref" in bad("click", "@x1")
    assert "action JSON is not valid" in bad("do", '{"action": "fly"}')
    assert "action JSON is not valid" in bad("do", "{not json")
    schema = tmp_path / "broken.json"
    schema.write_text("{not json")
    assert "is not JSON" in bad("extract", "the table", "--schema", str(schema))
    schema.write_text(json.dumps({"type": "nonsense"}))
    assert "not a valid JSON schema" in bad("extract", "the table", "--schema", str(schema))
    assert "no secret 'NOPE'" in bad("secret", "@e2", "NOPE")
    with socket.socket(socket.AF_UNIX) as raw:  # a request that is no request
        raw.settimeout(10)
        raw.connect(str(shell.directory / "daemon.sock"))
        raw.sendall(b"not json\n")
        assert json.loads(raw.recv(10000))["code"] == 2
    assert shell("session", "close").returncode == 0
    assert "no open session 'default'" in bad("act", "Sign in as alice")


def test_a_crashed_browser_is_exit_6_and_start_again_recovers(shell: Shell, shop_url: str) -> None:
    assert shell("session", "start", "--url", f"{shop_url}/login", *shell.flags()).returncode == 0
    pid = shell.daemon_pid()
    assert pid is not None
    for child in descendants(pid):  # Chromium and its helpers, killed
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    gone = shell("session", "snap")
    assert gone.returncode == 6 and gone.stderr.count("\n") == 1, (gone.stdout, gone.stderr)
    again = shell("session", "start", "--url", f"{shop_url}/login", *shell.flags())
    assert again.returncode == 0, again.stderr
    assert shell("session", "snap").stdout.startswith('@e1 textbox "User"')


def _ends(pid: int, within_s: float = 60.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or b"State:\tZ" in Path(f"/proc/{pid}/status").read_bytes():
            return True
        time.sleep(0.1)
    return False


def test_the_process_ends_with_its_last_session_and_when_idle(shell: Shell, shop_url: str) -> None:
    assert shell("session", "start", "--url", f"{shop_url}/login", *shell.flags()).returncode == 0
    pid = shell.daemon_pid()
    assert pid is not None
    assert shell("session", "close").returncode == 0
    assert _ends(pid) and not (shell.directory / "daemon.sock").exists()
    idle = {"WEBAGENT_SHELL_IDLE_S": "2"}
    assert shell("session", "start", "--url", f"{shop_url}/login", *shell.flags(), extra_env=idle).returncode == 0
    pid = shell.daemon_pid()
    assert pid is not None and _ends(pid)  # no request for 2 s: its sessions closed, it ends
    assert not (shell.directory / "daemon.sock").exists()
    assert shell("session", "snap").returncode == 2


def test_sessions_are_isolated_from_each_other(shell: Shell, shop_url: str) -> None:
    for name in ("a", "b"):
        assert (
            shell("session", "--session", name, "start", "--url", f"{shop_url}/login", *shell.flags()).returncode == 0
        )
    shell("session", "--session", "a", "snap")
    for args in (["type", "@e1", "alice"], ["secret", "@e2", "PASSWORD"], ["click", "@e3"]):
        assert shell("session", "--session", "a", *args).returncode == 0
    code, other = shell.json("--session", "b", "goto", f"{shop_url}/items")
    assert code == 3 and other["url"] is None, other  # sent back to the sign-in it was on: no cookie of a's
    code, listed = shell.json("list")
    assert sorted((s["name"], s["title"]) for s in listed["sessions"]) == [("a", "Items"), ("b", "Sign in")]
