"""Task files (ours and WebVoyager's), reference answers, and reference matching."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from webagent.config import AgentSettings
from webagent.errors import InputError
from webagent.tasks import (
    TaskOptions,
    TaskSpec,
    check_run_dirs,
    load_references,
    load_tasks,
    reference_matches,
    run_dir_name,
)

from ..strategies import JSON_VALUES, MESSY_TEXT, PROPERTIES, json_objects_with


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def task_line(**fields: Any) -> str:
    return json.dumps(fields)


# ---------------------------------------------------------------- load_tasks: good files


def test_our_format(tmp_path: Path) -> None:
    path = write(
        tmp_path / "tasks.jsonl",
        task_line(id="a", url="http://127.0.0.1:8000/catalog/", goal="Find the price"),
        task_line(id="b", url="https://example.com/x?y=1", goal="Do b", web_name="Example", reference="42"),
        task_line(id="c", url="localhost:9000/p", goal="Do c", answer=["x", 7]),
    )
    tasks = load_tasks(path)
    assert tasks == [  # a file's tasks are data unless the operator trusts it
        TaskSpec(id="a", url="http://127.0.0.1:8000/catalog/", goal="Find the price", trusted=False),
        TaskSpec(
            id="b", url="https://example.com/x?y=1", goal="Do b", web_name="Example", reference=["42"], trusted=False
        ),
        TaskSpec(id="c", url="http://localhost:9000/p", goal="Do c", reference=["x", "7"], trusted=False),
    ]
    assert all(task.trusted for task in load_tasks(path, trusted=True))


def test_a_task_line_carries_its_run_options(tmp_path: Path) -> None:
    path = write(
        tmp_path / "tasks.jsonl",
        task_line(
            id="a", url="http://127.0.0.1:8000/", goal="g", max_steps=4, expect="the cart is empty", trace="always"
        ),
        json.dumps({"id": "m", "task": "miniwob/click-button", "seed": 3, "max_time_s": 20}),
        task_line(id="plain", url="http://127.0.0.1:8000/", goal="g"),
    )
    a, m, plain = load_tasks(path)
    assert a.options == TaskOptions(max_steps=4, expect="the cart is empty", trace="always")
    assert a.options.settings(AgentSettings(max_steps=30)).max_steps == 4
    assert m.benchmark == "miniwob/click-button" and m.options == TaskOptions(max_time_s=20)
    assert plain.options == TaskOptions() and plain.options.settings(AgentSettings()) == AgentSettings()
    assert TaskSpec.model_validate(a.model_dump(mode="json")) == a  # data: what a Ray actor receives


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"max_steps": 0}, "max_steps: Input should be greater than 0"),
        ({"trace": "sometimes"}, "trace: Input should be 'off', 'on-failure' or 'always'"),
        ({"expect": "x" * 20_001}, "expect: String should have at most 20000 characters"),
    ],
)
def test_a_bad_option_names_its_line_and_key(tmp_path: Path, option: dict[str, Any], message: str) -> None:
    path = write(tmp_path / "tasks.jsonl", GOOD, task_line(id="x", url="https://example.com", goal="g", **option))
    with pytest.raises(InputError) as info:
        load_tasks(path)
    assert str(info.value).startswith(f"{path}:2: ") and message in str(info.value)


def test_webvoyager_format(tmp_path: Path) -> None:
    path = write(
        tmp_path / "WebVoyager_data.jsonl",
        json.dumps(
            {
                "web_name": "Allrecipes",
                "id": "Allrecipes--0",
                "ques": "Provide a recipe for vegetarian lasagna with more than 100 reviews.",
                "web": "https://www.allrecipes.com/",
            }
        ),
        json.dumps({"web_name": "Amazon", "id": "Amazon--3", "ques": "Find a USB-C cable", "web": "www.amazon.com"}),
    )
    tasks = load_tasks(path)
    assert [t.id for t in tasks] == ["Allrecipes--0", "Amazon--3"]
    assert tasks[0].goal.startswith("Provide a recipe for vegetarian lasagna")
    assert tasks[0].url == "https://www.allrecipes.com/"
    assert tasks[0].web_name == "Allrecipes"
    assert tasks[1].url == "https://www.amazon.com"  # a bare host gets https://
    assert tasks[1].reference == []


def test_integer_ids_become_strings(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", json.dumps({"id": 7, "ques": "q", "web": "https://example.com"}))
    assert load_tasks(path)[0].id == "7"


def test_blank_lines_and_comments_are_skipped(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        "# a comment line",
        "",
        "   ",
        task_line(id="a", url="https://example.com", goal="g"),
        "    # an indented comment",
        "\t",
        task_line(id="b", url="https://example.com", goal="g"),
        "",
    )
    assert [t.id for t in load_tasks(path)] == ["a", "b"]


def test_crlf_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        (task_line(id="a", url="https://example.com", goal="g") + "\r\n" + "# c\r\n" + "\r\n").encode()
        + (task_line(id="b", url="https://example.com", goal="h") + "\r\n").encode()
    )
    assert [t.id for t in load_tasks(path)] == ["a", "b"]


def test_the_bundled_local_tasks_load(tmp_path: Path) -> None:
    from webagent.testing.sites import data_dir

    text = (data_dir() / "local.jsonl").read_text().replace("{base}", "http://127.0.0.1:1234")
    tasks = load_tasks(write(tmp_path / "local.jsonl", text.rstrip("\n")))
    assert [t.id for t in tasks] == [
        "catalog-price",
        "catalog-feedback",
        "form-register",
        "longpage-code",
        "tabs-order",
    ]
    assert all(t.url.startswith("http://127.0.0.1:1234/") for t in tasks)


# ---------------------------------------------------------------- load_tasks: errors name file:line


GOOD = task_line(id="ok", url="https://example.com", goal="g")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"id": "x", "url": "https://example.com", "goal": ', "not valid JSON"),
        ("not json at all", "not valid JSON"),
        ('["id", "url", "goal"]', "must be a JSON object"),
        (task_line(id="x", goal="g"), "lacks url"),
        (task_line(url="https://example.com", goal="g"), "lacks id"),
        (task_line(id="x", url="https://example.com"), "lacks goal"),
        (json.dumps({"id": "x", "ques": "q"}), "WebVoyager task lacks web"),
        (json.dumps({"web": "https://example.com", "ques": "q"}), "WebVoyager task lacks id"),
        (task_line(id="ok", url="https://example.com", goal="again"), "duplicate task id 'ok'"),
        (task_line(id="x", url="https://example.com", goal=""), "the goal must be a non-empty string"),
        (task_line(id="x", url="https://example.com", goal="  \t "), "the goal must be a non-empty string"),
        (task_line(id="x", url="https://example.com", goal=3), "the goal must be a non-empty string"),
        (task_line(id="", url="https://example.com", goal="g"), "task id must be a non-empty string"),
        (task_line(id=None, url="https://example.com", goal="g"), "task id must be a non-empty string"),
        (task_line(id="x", url="ftp://example.com", goal="g"), "scheme must be http"),
        (task_line(id="x", url="not a url", goal="g"), "invalid URL"),
        (task_line(id="x", url="", goal="g"), "no URL given"),
        (task_line(id="x", url="http://example.com:99999/", goal="g"), "port is not a number"),
        (task_line(id="x", url="http://example.com[", goal="g"), "Invalid IPv6 URL"),
        (task_line(id="x", url="https://example.com", goal="g", web_name=[]), "web_name must be a string"),
    ],
)
def test_bad_line_is_input_error_naming_file_and_line(tmp_path: Path, bad: str, message: str) -> None:
    path = write(tmp_path / "tasks.jsonl", "# header", GOOD, "", bad, GOOD.replace('"ok"', '"later"'))
    with pytest.raises(InputError) as info:
        load_tasks(path)
    text = str(info.value)
    assert text.startswith(f"{path}:4: "), text  # the 4th line of the file, counting comments and blanks
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n\n  # another\n"])
def test_empty_file_is_input_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=re.escape(f"task file {path} has no tasks")):
        load_tasks(path)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="cannot read task file"):
        load_tasks(tmp_path)  # a directory
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="cannot read task file"):
        load_tasks(binary)


def test_unicode_line_separator_inside_a_goal(tmp_path: Path) -> None:
    """JSON strings may hold U+2028/U+2029/U+0085 raw (json.dumps(ensure_ascii=False) writes them so);
    the file is still one task per ``\\n``-terminated line and must load."""
    goal = "first part\u2028second part\u0085third\u2029end"
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "a", "url": "https://example.com", "goal": goal}, ensure_ascii=False) + "\n")
    assert load_tasks(path)[0].goal == goal


def test_numeric_reference_answer(tmp_path: Path) -> None:
    """A number as the answer (common in QA task sets) is a reference, or a clean InputError; never a crash."""
    path = write(tmp_path / "t.jsonl", task_line(id="a", url="https://example.com", goal="How many?", answer=42))
    try:
        tasks = load_tasks(path)
    except InputError as exc:
        assert f"{path}:1:" in str(exc)
    else:
        assert tasks[0].reference == ["42"]


# ---------------------------------------------------------------- a file not trusted is data

_HEADER = {"browser": {"extra_http_headers": {"X": "{{PASSWORD}}"}}}


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        (_HEADER, "browser.extra_http_headers.X: a {{NAME}} secret placeholder"),
        ({"goal": "sign in with {{ PASSWORD }}"}, "goal: a {{NAME}} secret placeholder"),
        ({"expect": "the field shows {{PASSWORD}}"}, "expect: a {{NAME}} secret placeholder"),
        ({"url": "https://example.com/?q={{PASSWORD}}"}, "url: a {{NAME}} secret placeholder"),
        ({"browser": {"upload_dir": "/home/operator/private"}}, "browser.upload_dir: refused"),
        ({"browser": {"upload_files": ["../id_rsa"]}}, "browser.upload_files: refused"),
        ({"browser": {"storage_state": "state.json"}}, "browser.storage_state: refused"),
        ({"browser": {"proxy": "http://127.0.0.1:3128"}}, "browser.proxy: refused"),
        ({"browser": {"http_credentials": "ada:pw-1234"}}, "browser.http_credentials: refused"),
        ({"browser": {"ignore_https_errors": True}}, "browser.ignore_https_errors: refused"),
        ({"browser": {"permissions": ["clipboard-read"]}}, "browser.permissions: refused"),
        ({"url": "file:///etc/passwd"}, "url: a file: start URL is refused"),
    ],
)
def test_a_line_of_a_file_not_trusted_may_not_use_the_operators_secrets_files_or_network(
    tmp_path: Path, fields: dict[str, Any], key: str
) -> None:
    line = {"id": "x", "url": "https://example.com/", "goal": "g", **fields}
    path = write(tmp_path / "tasks.jsonl", GOOD, json.dumps(line))
    with pytest.raises(InputError) as info:
        load_tasks(path)
    text = str(info.value)
    assert text.startswith(f"{path}:2: {key}") and "--trust-tasks" in text and "\n" not in text, text
    assert "pw-1234" not in text
    # The operator's word makes the same line a task like any other.
    (task,) = [t for t in load_tasks(path, trusted=True) if t.id == "x"]
    assert task.trusted


def test_a_line_of_a_file_not_trusted_keeps_what_touches_only_its_own_session(tmp_path: Path) -> None:
    browser = {"locale": "fr-FR", "device": "iPhone 15", "extra_http_headers": {"X-Test": "1"}, "permissions": []}
    path = write(tmp_path / "tasks.jsonl", task_line(id="x", url="http://127.0.0.1:8000/", goal="g", browser=browser))
    (task,) = load_tasks(path)
    assert task.browser is not None and task.browser.locale == "fr-FR" and not task.trusted


def test_a_task_built_as_not_trusted_is_checked_too() -> None:
    with pytest.raises(ValueError, match=r"browser\.upload_dir: refused"):
        TaskSpec.model_validate(
            {"id": "x", "url": "https://e.test/", "goal": "g", "browser": {"upload_dir": "/"}, "trusted": False}
        )
    assert TaskSpec(id="x", url="https://e.test/", goal="{{PASSWORD}}").trusted  # built in code: the operator's


# ---------------------------------------------------------------- property: JSONL round trip

_ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20).filter(
    lambda s: s.strip() != ""
)
_goals = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=80).filter(
    lambda s: s.strip() != ""
)
_paths = st.text(st.sampled_from("abcxyz0129-_/.~%"), max_size=20)
_urls = st.builds(lambda port, path: f"http://127.0.0.1:{port}/{path}", st.integers(1, 65535), _paths)
# Distinct run directories (case ignored, as check_run_dirs does): "P" and "p" are refused, rightly.
_tasks = st.lists(
    st.tuples(_ids, _urls, _goals), min_size=1, max_size=8, unique_by=lambda t: run_dir_name(t[0]).lower()
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tasks=_tasks, ensure_ascii=st.booleans(), webvoyager=st.booleans())
def test_generated_tasks_round_trip(
    tmp_path: Path, tasks: list[tuple[str, str, str]], ensure_ascii: bool, webvoyager: bool
) -> None:
    path = tmp_path / "gen.jsonl"
    lines = []
    for task_id, url, goal in tasks:
        obj = (
            {"web_name": "W", "id": task_id, "ques": goal, "web": url}
            if webvoyager
            else {
                "id": task_id,
                "url": url,
                "goal": goal,
            }
        )
        lines.append(json.dumps(obj, ensure_ascii=ensure_ascii))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = load_tasks(path, trusted=True)  # any goal: a {{NAME}} in one is for the trusted
    assert [(t.id, t.url, t.goal) for t in loaded] == tasks


# ---------------------------------------------------------------- references


def test_webvoyager_reference_answers(tmp_path: Path) -> None:
    path = tmp_path / "reference_answer.json"
    path.write_text(
        json.dumps(
            {
                "Allrecipes": {
                    "notice": "Answers may change over time.",
                    "answers": [
                        {"id": 0, "type": "golden", "ans": "Vegetarian Four Cheese Lasagna"},
                        {"id": 1, "type": "possible", "ans": "Easy Vegetarian Lasagna"},
                    ],
                },
                "Amazon": {"notice": "", "answers": [{"id": 3, "type": "golden", "ans": 12}]},
            }
        )
    )
    assert load_references(path) == {
        "Allrecipes--0": ["Vegetarian Four Cheese Lasagna"],
        "Allrecipes--1": ["Easy Vegetarian Lasagna"],
        "Amazon--3": ["12"],
    }


def test_plain_reference_map(tmp_path: Path) -> None:
    path = tmp_path / "refs.json"
    path.write_text(json.dumps({"catalog-price": "$12.50", "tabs-order": ["ORD-58213", "58213"], "n": []}))
    assert load_references(path) == {"catalog-price": ["$12.50"], "tabs-order": ["ORD-58213", "58213"], "n": []}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read reference file"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"a": 3}', "cannot read the entry 'a'"),
        ('{"a": {"notice": "no answers"}}', "cannot read the entry 'a'"),
    ],
)
def test_bad_reference_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "refs.json"
    path.write_text(content)
    with pytest.raises(InputError, match=re.escape(message)):
        load_references(path)
    with pytest.raises(InputError, match="does not exist"):
        load_references(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("answer", "refs", "expected"),
    [
        ("The price is $12.50.", ["$12.50"], True),
        ("the order is ord-58213", ["ORD-58213"], True),
        ("New   York\nCity", ["new york city"], True),
        ("  Vegetarian Four  Cheese Lasagna ", ["vegetarian four cheese lasagna"], True),
        ("$12.5", ["$12.50"], False),
        ("no idea", ["x", "y", "idea"], True),
        ("no idea", ["x", "y"], False),
        ("anything", [], False),
        (None, ["x"], False),
        ("", ["x"], False),
        ("anything", [""], False),  # an empty reference matches nothing
        ("anything", ["   "], False),
    ],
)
def test_reference_matches(answer: str | None, refs: list[str], expected: bool) -> None:
    assert reference_matches(answer, refs) is expected


# ---------------------------------------------------------------- property: any file at all

TASK_KEYS = ["id", "url", "goal", "ques", "web", "web_name", "reference", "answer"]
_URLISH = st.sampled_from(
    ["http://127.0.0.1:8000/", "example.com", "ftp://x", "", "not a url", "localhost:80/a", "http://a.test["]
)
_FIELD_VALUES = st.one_of(_URLISH, _ids, JSON_VALUES)
_LINES = st.one_of(
    st.sampled_from(["", "   ", "# a comment", "  # indented comment", "\r"]),
    MESSY_TEXT.map(lambda t: t.replace("\n", " ").replace("\r", " ")),
    json_objects_with(TASK_KEYS, _FIELD_VALUES).map(json.dumps),
    st.tuples(_ids, _urls | _URLISH, _goals).map(lambda t: json.dumps({"id": t[0], "url": t[1], "goal": t[2]})),
)


@settings(parent=PROPERTIES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINES, max_size=8))
@example(  # ids that would share a run directory, then a bad line: the collision is the first bad line
    lines=[json.dumps({"id": i, "url": "http://127.0.0.1:8000/", "goal": "g"}) for i in "Pp"] + ["{"]
)
def test_any_task_file_loads_or_names_its_first_bad_line(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "any.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    try:
        tasks = load_tasks(path)
    except InputError as exc:
        message = str(exc)
        assert "\n" not in message
        where = re.match(rf"{re.escape(str(path))}:(\d+): ", message)
        if where is None:
            assert message == f"task file {path} has no tasks"
            return
        number = int(where.group(1))
        assert lines[number - 1].strip() and not lines[number - 1].lstrip().startswith("#")
        path.write_text("\n".join(lines[: number - 1]), encoding="utf-8")  # the lines before it are fine
        try:
            load_tasks(path)
        except InputError as before:
            assert str(before) == f"task file {path} has no tasks"
    else:
        assert len({t.id for t in tasks}) == len(tasks)
        assert all(t.id.strip() and t.goal.strip() for t in tasks)
        assert all(t.url.startswith(("http://", "https://", "file:", "about:")) for t in tasks)


# Any character, lone surrogates too (a JSON task file's "\ud800" is one), up to 4 bytes each.
_ANY_ID = st.text(st.characters(exclude_categories=()), min_size=1, max_size=200)


@PROPERTIES
@given(ids=st.lists(_ANY_ID, min_size=2, max_size=8, unique=True))
def test_distinct_task_ids_get_distinct_run_directories(ids: list[str]) -> None:
    names = [run_dir_name(i) for i in ids]
    assert len(set(names)) == len(ids), dict(zip(ids, names, strict=True))
    for name in names:
        assert name and "/" not in name and "\x00" not in name and name not in (".", "..")
        assert len(name.encode()) <= 109  # bytes, as file systems count (a name is valid UTF-8)
    # An id that looks like another one's generated name does not take that name.
    generated = run_dir_name("a/b")
    assert run_dir_name(generated) != generated


def test_a_run_directory_name_is_cut_by_bytes_on_a_character_boundary() -> None:
    long_id = "\U0001d400" * 100  # 100 letters of 4 bytes: 400 bytes, too long for a file name
    name = run_dir_name(long_id)
    assert name == "\U0001d400" * 25 + "-" + name[-8:] and len(name.encode()) == 109
    assert run_dir_name("\u00e9" * 51) == "\u00e9" * 50 + "-" + run_dir_name("\u00e9" * 51)[-8:]
    assert run_dir_name("ok-\ud800") == "ok-_-" + run_dir_name("ok-\ud800")[-8:]


def test_an_id_utf8_cannot_carry_is_one_line_of_error(tmp_path: Path) -> None:
    """A JSON escape can write a lone surrogate; no results line could hold it (it was a crash)."""
    path = write(tmp_path / "t.jsonl", '{"id": "a\\ud800", "url": "http://127.0.0.1:9/", "goal": "g"}')
    with pytest.raises(InputError, match=r"t.jsonl:1: task id 'a\\ud800' is not valid text at character 2"):
        load_tasks(path)


def test_ids_that_would_share_a_run_directory_are_named_at_the_later_ones_line(tmp_path: Path) -> None:
    """A bad line is named where it is: the file's first bad line, not a message about the file
    once every line has been read (a line of broken JSON after it is never reached)."""
    url = "http://127.0.0.1:9/"
    path = write(
        tmp_path / "t.jsonl",
        task_line(id="P", url=url, goal="g"),
        "# a comment",
        task_line(id="p", url=url, goal="g"),
        "{not json",
    )
    message = (
        r"t.jsonl:3: task ids 'P' and 'p' would share the run directory 'p' "
        r"\(file names ignore case on some systems, 'P' on line 1\); rename one"
    )
    with pytest.raises(InputError, match=message):
        load_tasks(path)
    shared = (
        r"the tasks: task ids 'P' and 'p' would share the run directory 'p' \(file names ignore case on some systems\)"
    )
    with pytest.raises(InputError, match=shared):
        check_run_dirs(["P", "p"])


def test_a_task_of_a_file_not_trusted_is_always_guarded(tmp_path: Path) -> None:
    from webagent.config import AgentConfig
    from webagent.tasks import guarded

    config = AgentConfig()
    local = TaskSpec(id="l", url="http://127.0.0.1:8000/", goal="g")
    assert not guarded(local, config)  # the operator's local start: every local address open, no guard
    assert guarded(local.model_copy(update={"trusted": False}), config)  # a file's: that host:port only
    assert guarded(TaskSpec(id="p", url="https://example.com/", goal="g"), config)  # private networks shut
    assert guarded(local, AgentConfig.model_validate({"browser": {"allowed_domains": ["127.0.0.1"]}}))
