"""Image sizing (smart_resize), screenshot frames and the image <-> CSS coordinate mapping."""

from __future__ import annotations

import base64
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from webagent.config import PROFILES
from webagent.images import Frame, ResizeRule, Screenshot, frame_for, smart_resize
from webagent.roles.localizer import LOCALIZER_PROFILES, parse_click

HOLO1 = PROFILES["holo1"]
HOLO15 = PROFILES["holo1.5"]
HOLO2 = PROFILES["holo2"]
RULES = pytest.mark.parametrize("rule", [HOLO1, HOLO15, HOLO2], ids=["holo1", "holo1.5", "holo2"])
ALL_RULES = st.sampled_from([HOLO1, HOLO15, HOLO2])
FAST = settings(max_examples=150, deadline=None)


def test_profile_rules_are_the_model_processors() -> None:
    assert ResizeRule(factor=28, min_pixels=3136, max_pixels=1_003_520) == HOLO1
    assert ResizeRule(factor=28, min_pixels=3136, max_pixels=12_845_056) == HOLO15
    assert ResizeRule(factor=32, min_pixels=65_536, max_pixels=16_777_216) == HOLO2


# --------------------------------------------------------------------------- smart_resize


@pytest.mark.parametrize(
    ("rule", "size", "expected"),
    [
        # 812x1288 would exceed max_pixels: beta = sqrt(1024000/1003520), floors to 28*28 and 45*28.
        (HOLO1, (800, 1280), (784, 1260)),
        # Already multiples of 32 and within bounds: unchanged.
        (HOLO2, (800, 1280), (800, 1280)),
        # holo1.5 has a far larger max_pixels: plain rounding to multiples of 28.
        (HOLO15, (800, 1280), (812, 1288)),
        (HOLO15, (1080, 1920), (1092, 1932)),
        # Tiny images scale up to min_pixels: 56*56 = 3136 exactly.
        (HOLO1, (10, 10), (56, 56)),
        # 96x160 < 65536 -> beta = sqrt(65536/15000); ceil(6.53)=7, ceil(9.80)=10.
        (HOLO2, (100, 150), (224, 320)),
        # Huge: beta = sqrt(1e8/1003520) = 9.9824; floor(35.78) * 28 = 980.
        (HOLO1, (10_000, 10_000), (980, 980)),
        # Round-half-even like the reference processors: 42/28 = 1.5 -> 2, 70/28 = 2.5 -> 2.
        (HOLO1, (42, 1400), (56, 1400)),
        (HOLO1, (70, 1400), (56, 1400)),
        # A side smaller than half a factor never rounds to 0.
        (HOLO15, (10, 2000), (28, 1988)),
    ],
)
def test_smart_resize_hand_computed(rule: ResizeRule, size: tuple[int, int], expected: tuple[int, int]) -> None:
    assert smart_resize(size[0], size[1], rule) == expected


@pytest.mark.parametrize("size", [(0, 10), (10, 0), (-5, 10)])
def test_smart_resize_rejects_non_positive_sizes(size: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        smart_resize(size[0], size[1], HOLO1)


def test_smart_resize_rejects_extreme_aspect_ratio() -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2001, HOLO1)
    assert smart_resize(28, 5600, HOLO1) == (28, 5600)  # exactly 200 is allowed


def test_smart_resize_huge_images_scale_below_max_pixels() -> None:
    for rule in (HOLO1, HOLO15, HOLO2):
        h, w = smart_resize(9000, 16000, rule)
        assert h * w <= rule.max_pixels
        assert h % rule.factor == 0 and w % rule.factor == 0
        # The aspect ratio is kept to within one factor step.
        assert abs(w / h - 16000 / 9000) < 2 * rule.factor / h


@FAST
@given(
    rule=ALL_RULES,
    height=st.integers(1, 12_000),
    width=st.integers(1, 12_000),
)
def test_smart_resize_is_a_fixed_point_within_bounds(rule: ResizeRule, height: int, width: int) -> None:
    assume(max(height, width) / min(height, width) <= 100)
    h, w = smart_resize(height, width, rule)
    assert h % rule.factor == 0 and w % rule.factor == 0
    assert h >= rule.factor and w >= rule.factor
    assert rule.min_pixels <= h * w <= rule.max_pixels
    assert smart_resize(h, w, rule) == (h, w)


# --------------------------------------------------------------------------- frame_for


def test_frame_for_none_is_native() -> None:
    frame = frame_for(1280, 800, None)
    assert frame == Frame(1280, 800, 1280, 800)
    assert frame.is_identity and frame.scale == 1.0
    assert (frame.css_width, frame.css_height) == (1280, 800)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [(HOLO1, (1260, 784)), (HOLO15, (1260, 784)), (HOLO2, (1280, 800))],
    ids=["holo1", "holo1.5", "holo2"],
)
def test_frame_for_default_viewport(rule: ResizeRule, expected: tuple[int, int]) -> None:
    frame = frame_for(1280, 800, rule)
    assert (frame.image_width, frame.image_height) == expected
    assert frame.viewport_width == 1280 and frame.viewport_height == 800


def test_frame_for_holo15_floors_instead_of_upscaling() -> None:
    # smart_resize gives 812x1288, past the 800x1280 viewport: both sides are floored to 28s.
    frame = frame_for(1280, 800, HOLO15)
    assert frame.scale == pytest.approx(1260 / 1280)
    assert frame.css_width == pytest.approx(1280)
    assert frame.css_height == pytest.approx(784 * 1280 / 1260)
    assert not frame.is_identity


def _fits_without_upscaling(vw: int, vh: int, rule: ResizeRule) -> bool:
    """Whether any size with sides multiples of the factor, inside the viewport, is within bounds."""
    fw = vw // rule.factor * rule.factor
    fh = vh // rule.factor * rule.factor
    return fw > 0 and fh > 0 and fw * fh >= rule.min_pixels


@FAST
@given(rule=ALL_RULES, vw=st.integers(200, 3000), vh=st.integers(200, 3000))
def test_frame_never_larger_than_viewport(rule: ResizeRule, vw: int, vh: int) -> None:
    frame = frame_for(vw, vh, rule)
    assert frame.image_width % rule.factor == 0 and frame.image_height % rule.factor == 0
    # The server keeps the image exactly as sent.
    assert smart_resize(frame.image_height, frame.image_width, rule) == (frame.image_height, frame.image_width)
    # The CSS region shown never extends past the viewport.
    assert frame.css_width <= vw + 1e-9 and frame.css_height <= vh + 1e-9
    if _fits_without_upscaling(vw, vh, rule):
        assert frame.image_width <= vw and frame.image_height <= vh
        assert frame.scale <= 1.0


def test_frame_for_tiny_viewport_upscales_only_when_unavoidable() -> None:
    # 250x250 under holo2: the largest 32-multiple inside is 224x224 < min_pixels (65536), so the
    # only valid image is 256x256: the browser upscales, the CSS region is still the viewport.
    assert not _fits_without_upscaling(250, 250, HOLO2)
    frame = frame_for(250, 250, HOLO2)
    assert (frame.image_width, frame.image_height) == (256, 256)
    assert (frame.css_width, frame.css_height) == pytest.approx((250, 250))


@FAST
@given(rule=ALL_RULES, vw=st.integers(200, 3000), vh=st.integers(200, 3000))
def test_frame_covers_the_viewport_along_one_side(rule: ResizeRule, vw: int, vh: int) -> None:
    frame = frame_for(vw, vh, rule)
    # Uniform scale: one side of the CSS region is the full viewport side.
    assert math.isclose(frame.css_width, vw, rel_tol=1e-12) or math.isclose(frame.css_height, vh, rel_tol=1e-12)


# --------------------------------------------------------------------------- coordinates

VIEWPORTS = [(1280, 800), (1920, 1080), (1024, 768), (390, 844), (2560, 1440), (1000, 700)]
FRAMES = [frame_for(vw, vh, rule) for rule in (HOLO1, HOLO15, HOLO2, None) for vw, vh in VIEWPORTS]


@FAST
@given(frame=st.sampled_from(FRAMES), fx=st.floats(0, 1, exclude_max=True), fy=st.floats(0, 1, exclude_max=True))
def test_css_to_image_round_trip(frame: Frame, fx: float, fy: float) -> None:
    x, y = fx * frame.css_width, fy * frame.css_height
    ix, iy = frame.to_image(x, y)
    assert 0 <= ix <= frame.image_width and 0 <= iy <= frame.image_height
    cx, cy = frame.to_css(ix, iy)
    assert abs(cx - x) < 1e-9 and abs(cy - y) < 1e-9


@FAST
@given(frame=st.sampled_from(FRAMES), data=st.data())
def test_image_pixel_round_trip_is_exact(frame: Frame, data: st.DataObject) -> None:
    px = data.draw(st.integers(0, frame.image_width - 1))
    py = data.draw(st.integers(0, frame.image_height - 1))
    assert frame.contains(px, py)
    cx, cy = frame.to_css(px, py)
    assert cx < frame.css_width and cy < frame.css_height
    bx, by = frame.to_image(cx, cy)
    assert abs(bx - px) < 1e-9 and abs(by - py) < 1e-9
    assert (round(bx), round(by)) == (px, py)


@FAST
@given(
    frame=st.sampled_from([frame_for(vw, vh, HOLO2) for vw, vh in VIEWPORTS]),
    fx=st.floats(0, 1, exclude_max=True),
    fy=st.floats(0, 1, exclude_max=True),
)
def test_holo2_normalised_answer_lands_within_half_a_unit(frame: Frame, fx: float, fy: float) -> None:
    x, y = fx * frame.css_width, fy * frame.css_height
    ix, iy = frame.to_image(x, y)
    nx = round(ix / frame.image_width * 1000)
    ny = round(iy / frame.image_height * 1000)
    px, py = parse_click(f'{{"x": {nx}, "y": {ny}}}', LOCALIZER_PROFILES["holo2"], frame)
    cx, cy = frame.to_css(px, py)
    tol_x = frame.image_width / 1000 / 2 / frame.scale
    tol_y = frame.image_height / 1000 / 2 / frame.scale
    assert abs(cx - x) <= tol_x + 1e-9
    assert abs(cy - y) <= tol_y + 1e-9


def test_to_css_hand_computed() -> None:
    frame = Frame(1280, 800, 1260, 784)  # holo1 at 1280x800: scale = 1260/1280
    assert frame.scale == 1260 / 1280
    assert frame.to_css(630, 392) == pytest.approx((640.0, 398.2222222))
    assert frame.to_image(640, 0) == pytest.approx((630.0, 0.0))
    assert frame.contains(0, 0) and frame.contains(1259.9, 783.9)
    assert not frame.contains(1260, 0) and not frame.contains(0, 784) and not frame.contains(-0.1, 5)


# --------------------------------------------------------------------------- Screenshot

PNG_BYTES = b"\x89PNG\r\n\x1a\nfake"


@pytest.mark.parametrize(("mime", "ext"), [("image/png", "png"), ("image/jpeg", "jpg")])
def test_screenshot_encoding(mime: str, ext: str) -> None:
    b64 = base64.b64encode(PNG_BYTES).decode()
    shot = Screenshot(b64=b64, mime=mime, frame=frame_for(1280, 800, HOLO2))
    assert shot.data_url == f"data:{mime};base64,{b64}"
    assert shot.extension == ext
    assert shot.data() == PNG_BYTES
    assert shot.image_part() == {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64}"}}
