"""A coding agent's transcript, command after command through ``subprocess`` as a shell runs them:
sign in with a secret, add an item through a ref, hover a menu, download a CSV and read it, extract
the table as JSON with a schema, check a verdict, hand a goal to the roles; the secret in no output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import Shell
from .site import PASSWORD

pytestmark = pytest.mark.e2e


def ref_of(shell: Shell, query: str) -> str:
    code, found = shell.json("find", query)
    assert code == 0, found
    return str(found["matches"][0]["ref"])


def test_a_coding_agent_signs_in_adds_an_item_downloads_extracts_and_checks(
    shell: Shell, shop_url: str, tmp_path: Path
) -> None:
    outputs: list[str] = []

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        done = shell("session", "--json", *args)
        outputs.extend([done.stdout, done.stderr])
        return done.returncode, json.loads(done.stdout)

    code, started = run("start", "--url", f"{shop_url}/login", *shell.flags())  # 1
    assert code == 0 and started["title"] == "Sign in", started
    code, snap = run("snap")  # 2
    assert [(c["role"], c["name"]) for c in snap["controls"]] == [
        ("textbox", "User"),
        ("password", "Password"),
        ("button", "Sign in"),
    ]
    code, typed = run("type", "@e1", "alice")  # 3
    assert code == 0 and typed["value"] == "alice", typed
    code, secret = run("secret", "@e2", "PASSWORD")  # 4
    assert code == 0 and secret["value"] and set(str(secret["value"])) == {"•"}, secret
    code, signed = run("click", "@e3")  # 5
    assert code == 0 and str(signed["url"]).endswith("/items") and signed["title"] == "Items", signed
    field = ref_of(shell, "New item")  # 6
    code, typed = run("type", field, "Pear")  # 7
    assert code == 0 and typed["value"] == "Pear"
    code, added = run("click", ref_of(shell, "Add item"))  # 8, 9
    assert code == 0 and added["changed"] and added["target"] == 'button "Add item"', added
    code, text = run("text")  # 10
    assert code == 0 and "| Pear | 1" in str(text["text"]), text
    code, hovered = run("hover", ref_of(shell, "Menu"))  # 11, 12
    assert code == 0 and hovered["changed"], hovered
    code, clicked = run("click", ref_of(shell, "Export CSV"))  # 13, 14
    assert code == 0, clicked
    assert [d["name"] for d in clicked["downloads"]] == ["items.csv"], clicked
    code, listed = run("downloads")  # 15
    (csv,) = listed["downloads"]
    assert Path(csv["path"]).read_text() == "name,qty\nApple,3\n" and csv["bytes"] == 17
    schema = tmp_path / "items.schema.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "object", "required": ["name", "qty"]}}},
                "required": ["items"],
            }
        )
    )
    code, extracted = run("extract", "the items table", "--schema", str(schema))  # 16
    assert code == 0 and extracted["value"] == {"items": [{"name": "Apple", "qty": 3}, {"name": "Pear", "qty": 1}]}
    code, verdict = run("check", "alice is signed in")  # 17
    assert code == 0 and verdict["holds"] is True, verdict
    code, refused = run("check", "the basket is empty")  # 18: no rule holds: exit 1
    assert code == 1 and refused["holds"] is False
    code, acted = run("act", "How many item rows does the table have?", "--max-steps", "3")  # 19
    assert code == 0 and acted["success"] and acted["answer"] == "2" and Path(str(acted["run_dir"])).is_dir(), acted
    code, shot = run("screenshot")  # 20
    assert code == 0 and Path(str(shot["path"])).read_bytes()[:4] == b"\x89PNG" and shot["tabs"] == 1
    code, closed = run("close")  # 21
    assert code == 0 and closed["closed"] == ["default"]
    assert all(PASSWORD not in out for out in outputs)
    assert len(outputs) // 2 >= 12
