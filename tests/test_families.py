"""Image tokens and policy screenshot sizes per model family."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webagent.config import PROFILES, AgentConfig, load_config
from webagent.families import image_tokens, policy_extra_body, policy_frame, tile_grid
from webagent.images import frame_for
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
        ("holo2", (1000, 700), 12, math.ceil(1000 / 32) * math.ceil(700 / 32)),
    ],
)
def test_image_tokens_per_family(family: str, size: tuple[int, int], tiles: int, tokens: int) -> None:
    assert image_tokens(family, *size, max_num_tiles=tiles) == tokens  # type: ignore[arg-type]


def test_holotron_policy_frame_is_the_whole_viewport_scaled_to_the_tile_grid() -> None:
    frame = policy_frame("holotron", 1280, 800, rule=PROFILES["holo1.5"], max_num_tiles=2)
    assert (frame.image_width, frame.image_height) == (1024, 640)  # the 2x1 grid's width; the server squeezes
    assert frame.scale == pytest.approx(0.8)
    assert (frame.css_width, frame.css_height) == pytest.approx((1280, 800))  # nothing cut off
    assert image_tokens("holotron", 1024, 640, max_num_tiles=2) == 768
    # More tiles: a 3x2 grid (1536x1024) is larger than the viewport, which is sent as it is.
    six = policy_frame("holotron", 1280, 800, rule=PROFILES["holo1.5"], max_num_tiles=6)
    assert (six.image_width, six.image_height) == (1280, 800) and six.is_identity
    assert image_tokens("holotron", 1280, 800, max_num_tiles=6) == 7 * 256
    # A portrait viewport: a 1x2 grid, reached by its height.
    tall = policy_frame("holotron", 800, 1200, rule=PROFILES["holo1.5"], max_num_tiles=2)
    assert (tall.image_width, tall.image_height) == (683, 1024)


@given(st.integers(200, 3000), st.integers(200, 3000), st.integers(1, 12))
def test_holotron_policy_frames_cover_the_viewport_and_cost_what_the_viewport_would(
    width: int, height: int, tiles: int
) -> None:
    frame = policy_frame("holotron", width, height, rule=PROFILES["holo1.5"], max_num_tiles=tiles)
    assert frame.css_width == pytest.approx(width, abs=1) and frame.css_height == pytest.approx(height, abs=1)
    assert frame.image_width <= width and frame.image_height <= height
    cols, rows = tile_grid(width, height, tiles)
    assert frame.image_width >= min(width, 512 * cols) - 1 or frame.image_height >= min(height, 512 * rows) - 1


@pytest.mark.parametrize("family", ["holo1", "holo1.5", "holo2"])
def test_holo_policy_frames_are_their_processors_fixed_points(family: str) -> None:
    frame = policy_frame(family, 1280, 800, rule=PROFILES[family], max_num_tiles=2)  # type: ignore[arg-type]
    assert frame == frame_for(1280, 800, PROFILES[family])


def test_extra_body_per_family() -> None:
    assert policy_extra_body("holotron", 3) == {"mm_processor_kwargs": {"max_num_tiles": 3}}
    assert policy_extra_body("holo2", 2) == {"chat_template_kwargs": {"thinking": False}}
    assert policy_extra_body("holo1.5", 2) is None


def test_family_defaults_to_the_localizer_profile_and_can_be_set_by_environment() -> None:
    config = load_config(None, env={"WEBAGENT_LOCALIZER_PROFILE": "holo2"})
    assert config.policy.family is None and PolicyImages.from_config(config).family == "holo2"
    config = load_config(None, env={"WEBAGENT_POLICY_FAMILY": "holotron", "WEBAGENT_POLICY_MAX_NUM_TILES": "4"})
    images = PolicyImages.from_config(config)
    assert (images.family, images.max_num_tiles) == ("holotron", 4)
    with pytest.raises(Exception, match="family"):
        AgentConfig.model_validate({"policy": {"family": "holo3"}})


def test_policy_keeps_the_localizer_rule_overrides_when_the_families_match() -> None:
    config = AgentConfig.model_validate({"localizer": {"profile": "holo1.5", "max_pixels": 500_000}})
    images = PolicyImages.from_config(config)
    assert images.rule == config.localizer.resize_rule()
    assert images.frame(1280, 800) == frame_for(1280, 800, config.localizer.resize_rule())
