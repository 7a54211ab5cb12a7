"""A server's default tasks: a fixed sequence of the server's seed (every task once a pass, each draw
its own page seed), a reset's seed picking the same task and page whatever came before, and a task
file's web tasks marked as the file's (they reach their own host:port only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagent.env.deck import TaskDeck
from webagent.errors import InputError
from webagent.tasks import TaskSpec
from webagent.tasks.miniwob import MiniWoBTasks


def draws(deck: TaskDeck, n: int) -> list[tuple[str, int]]:
    out = []
    for _ in range(n):
        task, seed, _source = deck.draw()
        out.append((task if isinstance(task, str) else str(task), seed))
    return out


def test_the_sequence_is_the_server_seed_s() -> None:
    names = MiniWoBTasks().names()
    first = TaskDeck.load("miniwob", seed=7)
    sequence = draws(first, 2 * len(names))
    assert sequence == draws(TaskDeck.load("miniwob", seed=7), 2 * len(names))  # the same server seed
    assert sequence != draws(TaskDeck.load("miniwob", seed=8), 2 * len(names))
    one_pass = [task for task, _ in sequence[: len(names)]]
    assert sorted(one_pass) == sorted(f"miniwob/{n}" for n in names)  # each task once a pass
    assert one_pass != [task for task, _ in sequence[len(names) :]]  # each pass in its own order
    assert len({seed for _, seed in sequence}) > len(sequence) // 2  # pages differ too


def test_a_reset_s_seed_picks_its_own_task_and_page() -> None:
    deck = TaskDeck(["miniwob/a", "miniwob/b", "miniwob/c"], seed=1)
    chosen = deck.draw(11)
    draws(deck, 5)
    assert deck.draw(11) == chosen and chosen[1] == 11


def test_a_task_file_s_web_tasks_are_the_file_s(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "w", "url": "http://127.0.0.1:9/", "goal": "Find it", "reference": ["x"]}\n'
        '{"id": "b", "task": "miniwob/click-test", "seed": 4}\n'
    )
    deck = TaskDeck.load(str(tasks))
    sources = {(t.id if isinstance(t, TaskSpec) else t): s for t, _, s in (deck.draw(n) for n in range(40))}
    assert sources == {"w": "file", "b": "operator"}
    deck.check("reference")
    with pytest.raises(InputError, match="is a web task"):
        deck.check("task")


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"id": "s", "url": "https://e.com/", "goal": "g", "browser": {"storage_state": "s.json"}}', "storage_state"),
        ('{"id": "p", "url": "https://e.com/", "goal": "Type {{PASSWORD}}"}', "secret placeholder"),
        ('{"id": "f", "url": "file:///etc/passwd", "goal": "g"}', "a file: start URL"),
        ('{"id": "l", "url": "https://e.com/", "goal": "g", "browser": {"locale": "de-DE"}}', "'browser' settings"),
    ],
)
def test_a_task_file_is_data_and_its_refusals_name_no_flag_the_server_lacks(
    tmp_path: Path, line: str, words: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(line + "\n")
    with pytest.raises(InputError) as refused:
        TaskDeck.load(str(tasks))
    message = str(refused.value)
    assert words in message and "\n" not in message, message
    assert "pass --trust-tasks" not in message  # webagent env serve has no such flag
