"""``TaskSpec.run_spec``: the one conversion of a task to its run, and the refusals of what an entry
point cannot honour (never dropped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagent import Agent
from webagent.config import AgentSettings, ContextSettings
from webagent.env import RewardMode, WebEnv
from webagent.env.start import episode_start
from webagent.errors import InputError
from webagent.images import Screenshot
from webagent.loop import Judge, PageDriver, TaskCheck
from webagent.records import ModelCall, Verdict
from webagent.tasks import BenchmarkTask, TaskOptions, TaskSpec, load_tasks
from webagent.testing.offline import offline_config

BASE = AgentSettings()


def task(**options: object) -> TaskSpec:
    return TaskSpec(
        id="t", url="https://shop.test/", goal="Find the price", options=TaskOptions.model_validate(options)
    )


async def judge_nothing(answer: str, url: str, images: list[Screenshot]) -> tuple[Verdict, ModelCall | None]:
    raise AssertionError("never called")


def test_it_applies_the_options_and_the_browser_settings() -> None:
    browser = ContextSettings(storage_state=Path("/tmp/state.json"), locale="fr-FR")
    given = task(max_steps=2, max_time_s=30, budget_calls=7, expect="the total is shown").model_copy(
        update={"browser": browser}
    )
    spec = given.run_spec(BASE)
    assert (spec.url, spec.goal, spec.expect) == ("https://shop.test/", "Find the price", "the total is shown")
    assert spec.settings is not None
    assert (spec.settings.max_steps, spec.settings.max_time_s, spec.settings.budget_calls) == (2, 30, 7)
    assert spec.settings.max_attempts == BASE.max_attempts  # what the task does not set stays the config's
    assert spec.browser == browser and spec.judge is None and spec.task is None


def test_without_options_the_run_has_the_configs_settings() -> None:
    spec = task().run_spec(BASE)
    assert spec.settings is BASE and spec.expect is None and spec.browser is None


def test_a_benchmark_task_runs_on_its_page() -> None:
    class Page(BenchmarkTask):
        async def start(self, page: PageDriver) -> str | None:
            return None

        async def check(self, page: PageDriver) -> TaskCheck:
            raise AssertionError

    page = Page("shop/checkout", url="http://127.0.0.1:9/checkout", goal="Check out", seed=3)
    spec = TaskSpec(id="b", url="shop/checkout", goal="", benchmark="shop/checkout", seed=3).run_spec(BASE, page=page)
    assert (spec.url, spec.goal, spec.task) == (page.url, "Check out", page)


@pytest.mark.parametrize(("options", "key"), [({"trace": "always"}, "trace"), ({"max_steps": 3}, "max_steps")])
def test_what_an_entry_point_cannot_honour_is_refused_by_name(options: dict[str, object], key: str) -> None:
    with pytest.raises(InputError, match=rf"task 't': {key} cannot be honoured here \(the reason\)"):
        task(**options).run_spec(BASE, cannot={key: "the reason"})
    task().run_spec(BASE, cannot={key: "the reason"})  # left at its default: nothing to refuse
    task(trace="off").run_spec(BASE, cannot={"trace": "the reason"})  # written as the default


def test_a_browser_block_an_entry_point_cannot_open_is_refused() -> None:
    given = task().model_copy(update={"browser": ContextSettings(locale="de-DE")})
    with pytest.raises(InputError, match="browser cannot be honoured here"):
        given.run_spec(BASE, cannot={"browser": "the page is the caller's"})
    with pytest.raises(ValueError, match="no task option named 'nope'"):
        task().run_spec(BASE, cannot={"nope": "a typo of the caller's"})


def test_an_expectation_is_refused_where_answers_are_not_the_validators() -> None:
    judge: Judge = judge_nothing
    with pytest.raises(InputError, match=r"expect cannot be honoured here .*reference answers"):
        task(expect="the total is shown").run_spec(BASE, judge=judge)
    assert task().run_spec(BASE, judge=judge).judge is judge


def _env(reward: RewardMode = "validator") -> WebEnv:
    config = offline_config("http://127.0.0.1:9", "holo1.5")
    return WebEnv(agent=Agent(config), reward=reward)


async def test_an_environment_refuses_a_trace_and_an_expectation_it_cannot_judge() -> None:
    env = _env()
    try:
        with pytest.raises(InputError, match=r"trace cannot be honoured here .*no Playwright trace"):
            await env.reset(task(trace="on-failure"))
    finally:
        await env.aclose()
        await env.agent.aclose()
    env = _env(reward="reference")
    try:
        given = task(expect="the total is shown").model_copy(update={"reference": ["$12"]})
        with pytest.raises(InputError, match="expect cannot be honoured here"):
            await env.reset(given)
    finally:
        await env.aclose()
        await env.agent.aclose()


async def test_an_environment_runs_a_task_of_a_file_not_trusted_as_a_batch_does() -> None:
    agent = Agent(offline_config("http://127.0.0.1:9", "holo1.5"))
    local = TaskSpec(id="t", url="http://127.0.0.1:8123/", goal="Find the price")
    try:
        trusted = await episode_start(agent.runtime, local, None, reward="validator", source="operator")
        data = await episode_start(
            agent.runtime, local.model_copy(update={"trusted": False}), None, reward="validator", source="operator"
        )
    finally:
        await agent.aclose()
    assert trusted.run.policy is None  # the operator's own: a run's trust
    assert data.run.policy is not None and data.run.policy.active  # that one host:port, nothing else local


def test_a_benchmark_task_with_an_expectation_is_refused_where_it_is_written(tmp_path: Path) -> None:
    source = tmp_path / "tasks.jsonl"
    source.write_text('{"id": "a", "task": "miniwob/click-test", "seed": 1, "expect": "the button is green"}\n')
    with pytest.raises(InputError, match=r"tasks.jsonl:1: expect: a benchmark task is judged by its page"):
        load_tasks(source)
    with pytest.raises(ValueError, match="a benchmark task is judged by its page"):
        TaskSpec(id="b", url="x", goal="g", benchmark="miniwob/click-test", options=TaskOptions(expect="e"))
