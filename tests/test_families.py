"""Image tokens and policy screenshot sizes per model family."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webagent.config import AgentConfig, load_config
from webagent.families import family_extra_body, image_tokens, tile_grid
from webagent.roles.policy import PolicyImages


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
    ],
)
def test_image_tokens_per_family(family: str, size: tuple[int, int], tiles: int, tokens: int) -> None:
    assert image_tokens(family, *size, max_num_tiles=tiles) == tokens  # type: ignore[arg-type]


def test_a_holo_image_costs_what_the_processor_resizes_it_to() -> None:
    """The server resizes before it counts: the pixels sent matter only through the processor's rule."""
    assert image_tokens("holo1.5", 1260, 784) == 1260  # a fixed point of smart_resize
    assert image_tokens("holo1.5", 1280, 800) == 46 * 29  # resized to 1288x812
    assert image_tokens("holo2", 1260, 784) == 39 * 24  # resized to 1248x768
    assert image_tokens("holo1", 1920, 1200) <= 1_003_520 // 28**2  # holo1's pixel limit applies
    # Holotron: the grid, whatever the size: the localizer's 1260x784 costs what 1024x512 would.
    assert image_tokens("holotron", 1260, 784, max_num_tiles=2) == image_tokens("holotron", 1024, 512) == 768


def test_extra_body_per_family() -> None:
    assert family_extra_body("holotron", 3) == {"mm_processor_kwargs": {"max_num_tiles": 3}}
    assert family_extra_body("holo2", 2) == {"chat_template_kwargs": {"thinking": False}}
    assert family_extra_body("holo1.5", 2) is None


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
    with pytest.raises(Exception, match="family"):
        AgentConfig.model_validate({"policy": {"family": "holo3"}})
