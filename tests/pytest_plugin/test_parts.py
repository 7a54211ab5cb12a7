"""The plugin's parts: options and ini keys, launch arguments, cache files, budgets across processes,
and a run without pytest-playwright."""

from __future__ import annotations

import asyncio
import fcntl
import json
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import playwright
import pytest

from webagent.browser.launcher import CHROMIUM_ARGS, HARDENED_ARGS, find_chromium
from webagent.budget import BudgetLimits
from webagent.config import BrowserConfig
from webagent.errors import BrowserError, BudgetExceeded, DeadlineExceeded, WebAgentError
from webagent.families import FAMILIES
from webagent.pytest_plugin.artifacts import ReadOnlyCache, RecordingCache, RunFolder, cache_path, node_name, open_cache
from webagent.pytest_plugin.bridge import bounded
from webagent.pytest_plugin.fixtures import bundled_chromium_installed, extend_launch_args, playwright_registry
from webagent.pytest_plugin.options import SETTINGS, RunsMode
from webagent.pytest_plugin.session import SharedBudget, per_test_budget
from webagent.pytest_plugin.web import act_failure, check_failure
from webagent.records import CheckResult, Fingerprint, ModelCall, RoleUsage, RunResult
from webagent.replay import ReplayCache

from .conftest import Project, plugin_args

# ----------------------------------------------------------------------------- options


def configure(pytester: pytest.Pytester, *args: str) -> pytest.Config:
    return pytester.parseconfigure(*plugin_args(), "-p", "no:playwright-asyncio", *args)


def ini(pytester: pytest.Pytester, lines: str) -> None:
    pytester.makeini(f"[pytest]\nasyncio_default_fixture_loop_scope = session\n{lines}\n")


def test_options_then_the_usual_precedence(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makefile(".toml", **{"conf/webagent": '[policy]\nmodel = "from-toml"\n[agent]\nmax_steps = 9\n'})
    ini(pytester, "webagent_config = conf/webagent.toml\nwebagent_cache = read")
    monkeypatch.setenv("WEBAGENT_POLICY_MODEL", "from-env")
    monkeypatch.setenv("WEBAGENT_VALIDATOR_MODEL", "from-env")
    settings = configure(pytester).stash[SETTINGS]
    assert settings.config_path == pytester.path / "conf" / "webagent.toml"  # relative to the ini file
    assert settings.cache == "read" and settings.runs == "retain-on-failure"
    config = settings.load_config()
    assert config.policy.model == "from-env" and config.agent.max_steps == 9  # env over the file
    settings = configure(
        pytester,
        "--webagent-model=from-option",
        "--webagent-base-url=http://127.0.0.1:9/v1",
        "--webagent-localizer-profile=holo2",
        "--webagent-max-steps=4",
        "--webagent-max-calls-per-test=3",
        "--webagent-max-calls-per-session=0",
        "--webagent-cache=off",
        "--webagent-runs=on",
    ).stash[SETTINGS]
    config = settings.load_config()
    assert {config.role(r).model for r in ("policy", "localizer", "validator")} == {"from-option"}
    assert {config.role(r).base_url for r in ("policy", "localizer", "validator")} == {"http://127.0.0.1:9/v1"}
    assert config.localizer.profile == "holo2" and config.agent.max_steps == 4
    assert (settings.max_calls_per_test, settings.max_calls_per_session) == (3, 0)
    assert (settings.cache, settings.runs) == ("off", "on")


@pytest.mark.parametrize(
    ("args", "lines", "message"),
    [
        (["--webagent-max-steps=0"], "", "webagent: --webagent-max-steps must be an integer of at least 1, got '0'"),
        (["--webagent-max-calls-per-test=x"], "", "webagent: --webagent-max-calls-per-test must be an integer"),
        ([], "webagent_cache = sometimes", "webagent: ini key webagent_cache must be one of auto, read, write, off"),
        ([], "webagent_max_steps = -2", "webagent: ini key webagent_max_steps must be an integer of at least 1"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(
    pytester: pytest.Pytester, args: list[str], lines: str, message: str
) -> None:
    ini(pytester, lines)
    with pytest.raises(pytest.UsageError, match="^" + message.replace("(", r"\(")) as err:
        configure(pytester, *args)
    assert "\n" not in str(err.value)


def test_a_bad_config_file_fails_the_tests_using_web_in_one_line(project: Project) -> None:
    (project.path / "webagent.toml").write_text("[policy]\nmodel = \n")
    project.write("test_one.py", "def test_web(web):\n    pass\n\n\ndef test_plain():\n    pass\n")
    result = project.run()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*webagent: config file */webagent.toml is not valid TOML*"])


def test_config_errors_name_the_plugins_options_not_the_clis(project: Project) -> None:
    (project.path / "webagent.toml").write_text("[policy]\nmodel = 'm'\n")  # no base url anywhere
    project.write("test_one.py", "def test_web(web):\n    pass\n")
    missing = project.run()
    missing.assert_outcomes(errors=1)
    assert (
        "webagent: no base url configured for the policy model: set [policy] base_url in the config file, "
        "WEBAGENT_POLICY_BASE_URL, or --webagent-base-url (or the ini key webagent_base_url)"
    ) in missing.outlines
    bad = project.run("--webagent-base-url=localhost:8000/v1")
    bad.assert_outcomes(errors=1)
    assert any(
        line.startswith("webagent: invalid value for policy.base_url (from --webagent-base-url): must start with http")
        for line in bad.outlines
    ), bad.outlines
    for result in (missing, bad):
        assert "--policy-base-url" not in result.stdout.str()  # a flag of the CLI, not of pytest


def test_a_bad_webagent_variable_fails_only_the_tests_using_web(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBAGENT_POLICY_FAMILY", "bogus")
    project.write(
        "test_one.py",
        """
        def test_web(web):
            pass


        def test_page(page, shop):
            page.goto(f"{shop}/catalog/")
            assert page.url.endswith("/catalog/")
        """,
    )
    result = project.run("-v")
    result.assert_outcomes(passed=1, errors=1)  # the plain pytest-playwright test still has its browser
    result.stdout.fnmatch_lines(["*::test_web[[]chromium[]] ERROR*", "*::test_page[[]chromium[]] PASSED*"])
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "ERROR at setup of test_web" in line)
    assert lines[start + 1] == (  # the one line, with no traceback of the config error before it
        "webagent: invalid value for policy.family (from WEBAGENT_POLICY_FAMILY): "
        "not a model family: one of " + ", ".join(FAMILIES) + " (got 'bogus')"
    )
    assert "During handling" not in result.stdout.str()


def test_without_pytest_playwright_only_web_says_what_to_install(project: Project) -> None:
    project.write("test_one.py", "def test_web(web):\n    pass\n\n\ndef test_plain():\n    pass\n")
    result = project.run("-p", "no:playwright")  # and no:playwright-asyncio: neither is loaded
    result.assert_outcomes(passed=1, errors=1)
    assert "webagent: the web fixture needs pytest-playwright: pip install 'webagent[pytest]'" in result.stdout.str()
    assert "webagent: pytest-playwright" not in result.stdout.str()  # no header line either


# ----------------------------------------------------------------------------- launch arguments


def test_the_configured_chromium_reaches_pytest_playwrights_launch(tmp_path: Path) -> None:
    binary = tmp_path / "chrome"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    config = BrowserConfig(executable_path=str(binary), args=["--lang=fr"], headless=False)
    args = extend_launch_args({"args": ["--lang=fr"]}, config, browser_name="chromium", bundled_installed=True)
    assert args == {"executable_path": str(binary), "args": ["--lang=fr", *CHROMIUM_ARGS], "headless": False}
    # --headed, a channel, another browser, a remote browser: left as they are
    assert extend_launch_args({"headless": True}, config, browser_name="chromium", bundled_installed=True)["headless"]
    assert "executable_path" not in extend_launch_args(
        {"channel": "chrome"}, config, browser_name="chromium", bundled_installed=True
    )
    for name, remote in (("firefox", False), ("chromium", True)):
        assert extend_launch_args({}, config, browser_name=name, bundled_installed=True, remote=remote) == {}
    with pytest.raises(BrowserError, match="is not an executable file"):
        extend_launch_args(
            {}, BrowserConfig(executable_path=str(tmp_path / "none")), browser_name="chromium", bundled_installed=True
        )


def test_a_configured_navigation_policy_hardens_pytest_playwrights_browser() -> None:
    """A domain list or private_network = "block" guards every run: the browser gets the switches
    of webagent's guarded browsers (docs/security.md), the blocked names its resolver rules."""
    for config in (BrowserConfig(allowed_domains=["example.com"]), BrowserConfig(private_network="block")):
        args = extend_launch_args({}, config, browser_name="chromium", bundled_installed=True)
        assert args["args"] == list(HARDENED_ARGS)
    blocked = extend_launch_args(
        {}, BrowserConfig(blocked_domains=["evil.example"]), browser_name="chromium", bundled_installed=True
    )
    assert blocked["args"] == [*HARDENED_ARGS, "--host-resolver-rules=MAP evil.example ~NOTFOUND"]
    # The default (private addresses refused only for a public start URL) leaves the browser as it is.
    assert extend_launch_args({}, BrowserConfig(), browser_name="chromium", bundled_installed=True) == {}


def test_the_system_chromium_only_when_playwrights_own_is_missing() -> None:
    config = BrowserConfig()
    assert extend_launch_args({}, config, browser_name="chromium", bundled_installed=True) == {}
    missing = extend_launch_args({}, config, browser_name="chromium", bundled_installed=False)
    assert missing.get("executable_path") == find_chromium(config)  # the system's, on these machines
    assert missing.get("executable_path") is not None


def test_a_guarded_or_headed_plugin_browser_is_never_the_headless_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell ignores the switch that closes WebRTC's UDP (HARDENED_ARGS), and has no window."""
    from webagent.browser import launcher

    shell = tmp_path / "chromium-headless-shell"
    shell.write_text("#!/bin/sh\n")
    shell.chmod(0o755)
    monkeypatch.setattr(launcher, "SYSTEM_HEADLESS_SHELL", (str(shell),))

    def executable(config: BrowserConfig, base: dict[str, object] | None = None) -> object:
        args = extend_launch_args(base or {}, config, browser_name="chromium", bundled_installed=False)
        return args.get("executable_path")

    assert executable(BrowserConfig()) == str(shell)
    assert executable(BrowserConfig(allowed_domains=["example.com"])) not in (None, str(shell))
    assert executable(BrowserConfig(private_network="block")) not in (None, str(shell))
    assert executable(BrowserConfig(headless=False)) not in (None, str(shell))
    assert executable(BrowserConfig(), {"headless": False}) not in (None, str(shell))  # --headed


def test_a_guarded_plugin_browser_left_to_playwright_gets_its_full_build() -> None:
    """Playwright's own headless Chromium is its headless shell: a guarded config asks for its full
    build (channel "chromium"), where the WebRTC switch of HARDENED_ARGS works."""
    guarded = extend_launch_args(
        {}, BrowserConfig(allowed_domains=["example.com"]), browser_name="chromium", bundled_installed=True
    )
    assert guarded["channel"] == "chromium"
    assert "channel" not in extend_launch_args({}, BrowserConfig(), browser_name="chromium", bundled_installed=True)
    headed = extend_launch_args(
        {"headless": False}, BrowserConfig(private_network="block"), browser_name="chromium", bundled_installed=True
    )
    assert "channel" not in headed


def test_bundled_chromium_is_looked_for_where_playwright_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path))
    assert playwright_registry() == tmp_path
    assert not bundled_chromium_installed()
    manifest = json.loads((Path(playwright.__file__).parent / "driver/package/browsers.json").read_text())
    revision = next(b["revision"] for b in manifest["browsers"] if b["name"] == "chromium-headless-shell")
    (tmp_path / f"chromium_headless_shell-{revision}").mkdir()
    assert bundled_chromium_installed()
    monkeypatch.delenv("PLAYWRIGHT_BROWSERS_PATH")
    assert playwright_registry({"XDG_CACHE_HOME": "/c"}) == Path("/c/ms-playwright")


# ----------------------------------------------------------------------------- cache files


def test_one_cache_file_per_test_with_a_safe_distinct_name(tmp_path: Path) -> None:
    test_file = tmp_path / "tests" / "test_shop.py"
    assert cache_path(test_file, "test_checkout[chromium]") == (
        tmp_path / "tests" / "__webagent_cache__" / "test_shop" / "test_checkout[chromium].json"
    )
    odd = [cache_path(test_file, f"test_x[chromium-{p}]").name for p in ("a/b", "a:b", "a b", "a?b")]
    assert len(set(odd)) == 4 and all("/" not in n and ":" not in n and " " not in n for n in odd)
    assert len(cache_path(test_file, "test_" + "x" * 400).name) <= 130
    # a test named in a script of 4-byte letters: cut by bytes, what a file system limits (255)
    letters = cache_path(test_file, "test_" + "\U0001d400" * 100).name
    assert len(letters.encode()) <= 130 and letters.startswith("test_\U0001d400")
    # same-named tests of two classes (and the module's own): three files, named readably
    named = [cache_path(test_file, n).name for n in ("TestA::test_x[chromium]", "TestB::test_x[chromium]", "test_x")]
    assert named == ["TestA.test_x[chromium].json", "TestB.test_x[chromium].json", "test_x.json"]
    assert cache_path(test_file, "TestA::Inner::test_x[a::b]").name.startswith("TestA.Inner.test_x[a__b]-")


def test_the_cache_file_of_a_test_names_its_class(pytester: pytest.Pytester) -> None:
    ini(pytester, "")
    pytester.makepyfile(
        """
        import pytest

        class TestA:
            def test_x(self): pass

        class TestB:
            @pytest.mark.parametrize("p", ["a/b"])
            def test_x(self, p): pass

        def test_x(): pass
        """
    )
    items, _ = pytester.inline_genitems(*plugin_args(), "-p", "no:playwright-asyncio", "-p", "no:playwright")
    assert [node_name(item) for item in items] == ["TestA::test_x", "TestB::test_x[a/b]", "test_x"]
    assert len({cache_path(item.path, node_name(item)) for item in items}) == 3


URL = "http://127.0.0.1:8123/p"


def _fingerprint(url: str) -> Fingerprint:
    return Fingerprint(url=url, title="t", text="0" * 16, image="0" * 64, size=(1260, 784))


def test_cache_modes(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    seen = _fingerprint("/p")
    recorded = ReplayCache(path)
    recorded.store_answer("check: x", seen, {"holds": True, "feedback": "ok"}, url=URL)
    before = path.read_text()
    read = open_cache("read", path)
    assert isinstance(read, ReadOnlyCache) and read.answer_for("check: x", seen, url=URL) is not None
    read.store_answer("check: y", seen, {"holds": True, "feedback": "ok"}, url=URL)
    assert path.read_text() == before  # never written
    write = open_cache("write", path)
    assert isinstance(write, RecordingCache) and write.answer_for("check: x", seen, url=URL) is None
    assert write.replay_for("act: g", goal="g", url=URL).recorded == []
    write.store_answer("check: y", seen, {"holds": True, "feedback": "ok"}, url=URL)
    assert "check: y" in json.loads(path.read_text())["answers"]
    assert open_cache("off", path) is None
    assert type(open_cache("auto", path)) is ReplayCache


# ----------------------------------------------------------------------------- budgets


def _call() -> ModelCall:
    return ModelCall(role="policy", model="m", usage=RoleUsage(calls=1, prompt_tokens=10, completion_tokens=2))


def _spend(path: str) -> int:
    """Reserve and charge calls on the shared budget at ``path`` until it is spent; how many were made."""
    budget = SharedBudget(BudgetLimits(calls=25), lambda call: 0.0, Path(path))
    made = 0
    while True:
        try:
            budget.check()
        except BudgetExceeded:
            return made
        budget.charge(_call())
        made += 1


def test_the_session_budget_is_exact_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        made = list(pool.map(_spend, [str(path)] * 3))
    assert sum(made) == 25
    assert json.loads(path.read_text()) == {"calls": 25, "tokens": 300, "usd": 0.0, "in_flight": 0}
    with pytest.raises(
        BudgetExceeded, match=r"session's budget of 25 model calls .* raise --webagent-max-calls-per-session"
    ):
        SharedBudget(BudgetLimits(calls=25), lambda call: 0.0, path, hint="--webagent-max-calls-per-session").check()


def test_the_budget_lock_is_waited_for_a_bounded_time(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    budget = SharedBudget(BudgetLimits(calls=5), lambda call: 0.0, path, lock_wait_s=0.2)
    with open(tmp_path / "budget.json.lock", "a+") as other:  # another worker holding the lock
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(WebAgentError, match=r"budget file .*budget.json stayed locked for 0.2 s"):
            budget.check()
        assert 0.2 <= time.monotonic() - started < 2
        assert budget.reserved == 0
        threading.Timer(0.05, fcntl.flock, (other, fcntl.LOCK_UN)).start()
        budget.check()  # the lock is given up while it waits: the reservation is made
    assert budget.reserved == 1 and json.loads(path.read_text())["in_flight"] == 1


def test_reservations_a_test_left_are_given_back(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    budget = SharedBudget(BudgetLimits(calls=3), lambda call: 0.0, path)
    budget.check()
    budget.charge(_call())
    budget.check()
    budget.check()  # two calls interrupted after their reservation (Ctrl-C, a deadline)
    other = SharedBudget(BudgetLimits(calls=3), lambda call: 0.0, path)  # another worker
    with pytest.raises(BudgetExceeded, match="1 made, 2 in flight"):
        other.check()
    budget.release_held()  # at the test's end
    assert budget.reserved == 0
    assert json.loads(path.read_text()) == {"calls": 1, "tokens": 12, "usd": 0.0, "in_flight": 0}
    other.check()
    budget.release_held()  # nothing of its own left: the other worker's reservation stays
    assert json.loads(path.read_text())["in_flight"] == 1


def test_a_test_budget_names_its_option() -> None:
    budget = per_test_budget(1, lambda call: 0.0)
    assert budget is not None and per_test_budget(None, lambda call: 0.0) is None
    budget.check()
    budget.charge(_call())
    with pytest.raises(
        BudgetExceeded, match=r"the test's budget of 1 model calls .* raise --webagent-max-calls-per-test"
    ):
        budget.check()


# ----------------------------------------------------------------------------- deadlines


async def test_a_call_past_its_deadline_is_cancelled_with_a_one_line_error() -> None:
    cancelled = asyncio.Event()

    async def hangs() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(DeadlineExceeded, match=r"^web.act\('x'\) did not end within 0.05 s$"):
        await bounded(hangs(), 0.05, "web.act('x')")
    assert cancelled.is_set()

    async def times_out_itself() -> None:
        raise TimeoutError("its own")

    with pytest.raises(TimeoutError, match="its own"):
        await bounded(times_out_itself(), 5, "web.check('y')")
    assert await bounded(asyncio.sleep(0, result=3), 5, "z") == 3


# ----------------------------------------------------------------------------- run folders and messages


def _runs(tmp_path: Path, mode: RunsMode) -> RunFolder:
    folder = RunFolder(tmp_path / "test-results" / "test-x", mode, tmp_path)
    assert folder.output_dir == (None if mode == "off" else tmp_path / "test-results" / "test-x" / "webagent")
    if folder.output_dir is not None:
        (folder.output_dir / "check-1").mkdir(parents=True)
        (folder.output_dir / "check-1" / "report.html").write_text("<html>")
    return folder


def test_run_folders_are_kept_on_failure_or_when_asked(tmp_path: Path) -> None:
    kept = _runs(tmp_path / "a", "retain-on-failure").finish(failed=True)
    assert kept == [tmp_path / "a" / "test-results" / "test-x" / "webagent" / "check-1" / "report.html"]
    assert _runs(tmp_path / "b", "retain-on-failure").finish(failed=False) == []
    assert not (tmp_path / "b" / "test-results" / "test-x").exists()  # the test's folder too, as it was ours
    assert len(_runs(tmp_path / "c", "on").finish(failed=False)) == 1
    assert _runs(tmp_path / "d", "off").finish(failed=True) == []
    folder = _runs(tmp_path / "e", "on")
    assert folder.report(folder.output_dir / "check-1") == "test-results/test-x/webagent/check-1/report.html"
    assert folder.report(None) is None and folder.report(tmp_path / "nowhere") is None


def test_failure_messages_name_the_feedback_and_the_report() -> None:
    result = RunResult(
        success=False,
        answer="19.99",
        stop_reason="answered",
        message="the validator rejected 3 answers",
        url="http://shop/",
        goal="g",
        steps=4,
        feedback=["Include the currency.", "Include the currency symbol."],
    )
    assert act_failure("g", result, "r/act-1/report.html").splitlines() == [
        "web.act did not reach its goal 'g'",
        "stopped: answered (the validator rejected 3 answers)",
        "last answer: '19.99'",
        "validator: Include the currency symbol.",
        "report: r/act-1/report.html",
    ]
    check = CheckResult(holds=False, feedback="It shows the Red Gadget.", url="http://shop/p")
    assert check_failure("x " * 200, check, None).splitlines()[1:] == [
        "validator: It shows the Red Gadget.",
        "page: http://shop/p",
        "report: none (--webagent-runs off)",
    ]
    assert check_failure("x " * 200, check, None).splitlines()[0].endswith("x…'")  # a long statement is shortened
