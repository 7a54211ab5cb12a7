"""``--profile DIR`` across ``webagent run`` and ``webagent session``: a run that signs in (a cookie and a
local storage entry) leaves the next run, and a session, signed in; a profile in use is refused in one
line; a run without it is not signed in (what carries the sign-in is the profile)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from webagent.testing.sites import SiteServer

from .conftest import Shell, seen

pytestmark = pytest.mark.e2e


def run(shell: Shell, url: str, output: Path, *flags: str) -> tuple[int, str]:
    done = shell(
        "run", "--url", url, "--goal", "Visit the page", "--output", str(output), "--quiet", *shell.flags(), *flags
    )
    return done.returncode, done.stderr


def test_a_profile_keeps_a_run_signed_in_for_the_next_run_and_a_session(
    shell: Shell, site: SiteServer, tmp_path: Path
) -> None:
    profile = tmp_path / "profile"
    whoami = f"{site.url}/shell/whoami.html"
    code, err = run(shell, f"{site.url}/shell/signin.html", tmp_path / "r1", "--profile", str(profile))
    assert code == 0, err
    assert seen(site, "signin") == [{"page": "signin", "done": "yes"}]
    assert stat.S_IMODE(profile.stat().st_mode) == 0o700
    assert stat.S_IMODE((profile / "state.json").stat().st_mode) == 0o600

    code, err = run(shell, whoami, tmp_path / "r2")  # no profile: a fresh browser
    assert code == 0, err
    code, err = run(shell, whoami, tmp_path / "r3", "--profile", str(profile))
    assert code == 0, err
    fresh, kept = seen(site, "whoami")
    assert fresh["storage"] == "" and "session=alice" not in fresh["cookie"], fresh
    assert kept["storage"] == "alice" and "session=alice" in kept["cookie"], kept

    started = shell("session", "start", "--url", whoami, "--profile", str(profile), *shell.flags())
    assert started.returncode == 0, started.stderr
    assert seen(site, "whoami")[-1]["storage"] == "alice"
    code, err = run(shell, whoami, tmp_path / "r4", "--profile", str(profile))
    assert code == 2 and err.count("\n") == 1 and "is in use" in err and "Traceback" not in err, err
    assert len(seen(site, "whoami")) == 3  # the refused run opened no page
    assert shell("session", "close").returncode == 0
    code, err = run(shell, whoami, tmp_path / "r5", "--profile", str(profile))
    assert code == 0, err
