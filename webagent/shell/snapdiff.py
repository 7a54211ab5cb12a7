"""``snap --diff``: only the controls added, removed or changed since the session's previous ``snap``
(agent-browser sends only what changed, too). A control is the same one when its role, its name and
its rank among the controls with both are; it changed when its value did."""

from __future__ import annotations

from typing import Any

__all__ = ["Row", "diff_rows"]

#: One control of a snap as ``snap --json`` gives it: ``ref``, ``role``, ``name``, ``value``, ``x``, ``y``.
Row = dict[str, Any]


def _keyed(rows: list[Row]) -> dict[tuple[str, str, int], Row]:
    counts: dict[tuple[str, str], int] = {}
    keyed: dict[tuple[str, str, int], Row] = {}
    for row in rows:
        nth = counts.get((row["role"], row["name"]), 0)
        counts[(row["role"], row["name"])] = nth + 1
        keyed[(row["role"], row["name"], nth)] = row
    return keyed


def diff_rows(before: list[Row] | None, after: list[Row]) -> tuple[dict[str, Any], str]:
    """What changed from ``before`` (None: no snap yet, every control is new) to ``after``: the
    ``--json`` fields (``added``, ``removed``, ``changed``, ``same``) and the text, one line each
    (``+ @e4 button "Save"``, ``- button "Edit"``, ``~ @e2 textbox "Name" = 'Ada' (was '')``)."""
    old, new = _keyed(before or []), _keyed(after)
    added = [row for key, row in new.items() if key not in old]
    removed = [{k: row[k] for k in ("role", "name", "value")} for key, row in old.items() if key not in new]
    changed = [
        {**row, "was": old[key]["value"]}
        for key, row in new.items()
        if key in old and old[key]["value"] != row["value"]
    ]
    same = len(new) - len(added) - len(changed)

    def shown(row: Row) -> str:
        value = f" = {row['value']!r}" if row.get("value") not in (None, "") else ""
        return f'{row["role"]} "{row["name"]}"{value}'

    lines = [f"+ {row['ref']} {shown(row)}" for row in added]
    lines += [f"- {shown(row)}" for row in removed]
    lines += [f"~ {row['ref']} {shown(row)} (was {row['was']!r})" for row in changed]
    lines.append(f"{same} control(s) as before" if lines else f"no change since the last snap ({same} controls)")
    return {"added": added, "removed": removed, "changed": changed, "same": same}, "\n".join(lines)
