"""The registry of model families: image tokens, request fields, the names spelled out in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webagent.config import AgentConfig, load_config
from webagent.errors import ConfigError
from webagent.families import (
    FAMILIES,
    GROUNDING_FAMILIES,
    PROFILES,
    TOOL_ACTIONS,
    TOOL_NAMES,
    family_of,
    get_family,
    image_tokens,
    tile_grid,
)
from webagent.prompts import prompts_dir
from webagent.roles.policy import PolicyImages

ROOT = Path(__file__).resolve().parents[1]


def _reference_grid(width: int, height: int, max_num: int) -> tuple[int, int]:
    """InternVL's dynamic_preprocess grid choice, written out as the reference code does it."""
    target_ratios = sorted(
        {
            (i, j)
            for n in range(1, max_num + 1)
            for i in range(1, n + 1)
            for j in range(1, n + 1)
            if 1 <= i * j <= max_num
        },
        key=lambda x: x[0] * x[1],
    )
    aspect_ratio = width / height
    best_ratio_diff, best_ratio, area = float("inf"), (1, 1), width * height
    for ratio in target_ratios:
        ratio_diff = abs(aspect_ratio - ratio[0] / ratio[1])
        if ratio_diff < best_ratio_diff:
            best_ratio_diff, best_ratio = ratio_diff, ratio
        elif ratio_diff == best_ratio_diff and area > 0.5 * 512 * 512 * ratio[0] * ratio[1]:
            best_ratio = ratio
    return best_ratio


@given(st.integers(16, 4000), st.integers(16, 4000), st.integers(1, 16))
def test_tile_grid_matches_internvl(width: int, height: int, max_num: int) -> None:
    assert tile_grid(width, height, max_num) == _reference_grid(width, height, max_num)


@pytest.mark.parametrize(
    ("family", "size", "tiles", "tokens"),
    [
        ("holo1", (1260, 784), 12, 1260),
        ("holo1.5", (1260, 784), 12, 1260),
        ("holo2", (1280, 800), 12, 1000),
        ("holotron", (1260, 784), 12, 7 * 256),  # 3x2 tiles + a thumbnail
        ("holotron", (1024, 512), 2, 3 * 256),  # 2x1 + a thumbnail
        ("holotron", (512, 512), 1, 256),  # one tile: no thumbnail
        ("holo2", (1000, 700), 12, 31 * 22),  # resized to 992x704
        ("holo3", (1280, 800), 12, 1000),  # Qwen3.5's vision encoder: 16-px patches merged 2x2
        ("holo3.1", (1280, 800), 12, 1000),
        ("holo4", (1280, 800), 12, 1000),
    ],
)
def test_image_tokens_per_family(family: str, size: tuple[int, int], tiles: int, tokens: int) -> None:
    assert image_tokens(family, *size, max_num_tiles=tiles) == tokens


def test_a_holo_image_costs_what_the_processor_resizes_it_to() -> None:
    """The server resizes before it counts: the pixels sent matter only through the processor's rule."""
    assert image_tokens("holo1.5", 1260, 784) == 1260  # a fixed point of smart_resize
    assert image_tokens("holo1.5", 1280, 800) == 46 * 29  # resized to 1288x812
    assert image_tokens("holo2", 1260, 784) == 39 * 24  # resized to 1248x768
    assert image_tokens("holo1", 1920, 1200) <= 1_003_520 // 28**2  # holo1's pixel limit applies
    # Holotron: the grid, whatever the size: the localizer's 1260x784 costs what 1024x512 would.
    assert image_tokens("holotron", 1260, 784, max_num_tiles=2) == image_tokens("holotron", 1024, 512) == 768


def test_request_fields_per_family_and_kind() -> None:
    assert get_family("holotron").request_fields("agent", 3) == {"mm_processor_kwargs": {"max_num_tiles": 3}}
    assert get_family("holotron").request_fields("single", 3) == {"mm_processor_kwargs": {"max_num_tiles": 3}}
    assert get_family("holo2").request_fields("agent", 2) == {"chat_template_kwargs": {"thinking": False}}
    assert get_family("holo1.5").request_fields("agent", 2) is None
    # H's agent loop thinks (medium effort); its single-shot calls do not.
    assert get_family("holo3.1").request_fields("agent", 2) == {
        "chat_template_kwargs": {"enable_thinking": True},
        "reasoning_effort": "medium",
    }
    assert get_family("holo3").request_fields("single", 2) == {"chat_template_kwargs": {"enable_thinking": False}}


def test_family_defaults_to_the_localizer_profile_and_can_be_set_by_environment() -> None:
    config = load_config(None, env={"WEBAGENT_LOCALIZER_PROFILE": "holo2"})
    assert config.policy.family is None and PolicyImages.from_config(config).family == "holo2"
    # Taken from the localizer, the family adds nothing to policy requests (the policy's server may be
    # a hosted API that refuses chat_template_kwargs); set, it does.
    assert PolicyImages.from_config(config).extra_body is None
    config = load_config(None, env={"WEBAGENT_POLICY_FAMILY": "holo2"})
    assert PolicyImages.from_config(config).extra_body == {"chat_template_kwargs": {"thinking": False}}
    config = load_config(None, env={"WEBAGENT_POLICY_FAMILY": "holotron", "WEBAGENT_POLICY_MAX_NUM_TILES": "4"})
    images = PolicyImages.from_config(config)
    assert (images.family, images.max_num_tiles) == ("holotron", 4)


def test_an_unknown_family_or_profile_is_a_one_line_error_listing_the_known_ones() -> None:
    with pytest.raises(
        ConfigError,
        match=r"policy\.family.*not a model family: one of holo1, holo1\.5.* \(got 'holo9'\): set AgentConfig\.policy\.family$",
    ):
        load_config(None, overrides={"policy.family": "holo9"})
    with pytest.raises(
        ConfigError,
        match=r"localizer\.profile.*not a localizer profile: .* \(got 'holotron'\): set AgentConfig\.localizer\.profile$",
    ):
        load_config(None, overrides={"localizer.profile": "holotron"})
    with pytest.raises(Exception, match="family"):
        AgentConfig.model_validate({"policy": {"family": "holo9"}})


def test_settings_a_family_cannot_speak_are_refused_at_load() -> None:
    with pytest.raises(
        ConfigError, match=r"agent\.grounding = 'policy'.*holotron \(policy\.family\) does not.*'localizer'"
    ):
        load_config(None, overrides={"policy.family": "holotron", "agent.grounding": "policy"})
    with pytest.raises(ConfigError, match=r"policy\.output = 'tools' is not a reply format of holo3 .*json"):
        load_config(None, overrides={"policy.family": "holo3", "policy.output": "tools"})
    assert load_config(None, overrides={"policy.family": "holo3.1", "policy.output": "tools"}).policy.output == "tools"

    # Without a family the policy speaks webagent's generic contract, which cannot ground.
    with pytest.raises(ConfigError, match=r"a policy without policy\.family does not"):
        load_config(None, overrides={"agent.grounding": "policy"})
    # The localizer is needed only when it places the clicks.
    assert load_config(None, overrides={"policy.family": "holo3.1"}).needed_roles() == ("policy", "validator")
    assert load_config(None, overrides={"policy.family": "holo2"}).needed_roles() == (
        "policy",
        "localizer",
        "validator",
    )


def test_the_registry_is_consistent() -> None:
    for name, family in FAMILIES.items():
        assert family.name == name and family.models and family.match and family.sources
        assert family.policy.outputs and family.policy.grounding in ("policy", "localizer")
        if family.policy.grounding == "policy":
            assert family.policy.point is not None, name
        if family.localizer is not None:
            assert (prompts_dir() / family.localizer.template).is_file(), name
            assert family.rule is not None, name  # a localizer's screenshot is sized by a resize rule
        if family.policy.point is not None:
            assert family.rule is not None, name  # so is a grounding policy's
        if family.serving.hybrid:
            assert "--mamba-cache-mode align" in family.serving.flags and family.serving.align_blocks, name
        # Each family's own models are told apart by name.
        for model in family.models:
            told = family_of(model)
            assert told is not None and told.name == name, (model, told)
    assert set(PROFILES) <= set(FAMILIES) and set(GROUNDING_FAMILIES) <= set(FAMILIES)
    assert {TOOL_ACTIONS[tool] for tool in TOOL_NAMES.values()} == set(TOOL_NAMES)


def test_every_family_has_a_serving_recipe_with_its_flags() -> None:
    serving = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    for family in FAMILIES.values():
        heading = next((line for line in serving.splitlines() if line.startswith("## ") and family.label in line), None)
        assert heading is not None, f"docs/serving.md has no section for {family.label}"
        section = serving.split(heading, 1)[1].split("\n## ", 1)[0]
        for flag in family.serving.flags:
            assert flag in section, f"{family.label}'s recipe lacks {flag}"


# ---------------------------------------------------------------- names live in the registry

_NAME = re.compile(r"holo(?:tron|\d)|hcompany/", re.IGNORECASE)
_ALLOWED = {ROOT / "webagent" / "families" / "registry.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (docs, where names may be written)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def names_spelled_out(path: Path, root: Path = ROOT) -> list[str]:
    """The string constants of a source file (docstrings aside) that spell out a family, profile
    or model name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
            continue
        if _NAME.search(node.value) or node.value in FAMILIES:
            hits.append(f"{path.relative_to(root)}:{node.lineno}: {node.value[:60]!r}")
    return hits


def test_no_family_or_model_name_is_spelled_out_outside_the_registry() -> None:
    files = [*sorted((ROOT / "webagent").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    hits = [hit for path in files if path not in _ALLOWED for hit in names_spelled_out(path)]
    assert hits == []


def test_the_name_check_finds_a_name(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text('"""Holo2 is fine in a docstring."""\nMODEL = "Hcompany/Holo2-8B"\nP = "holo1.5"\n')
    assert [hit.split(": ", 1)[1] for hit in names_spelled_out(source, tmp_path)] == [
        "'Hcompany/Holo2-8B'",
        "'holo1.5'",
    ]
