"""Where each action of a caller's reply acts (``WebEnv.step``): the caller's points for the first,
else the reply's own (grounded), else the localizer's, asked during the step."""

from __future__ import annotations

from ..actions import Scroll, points_of
from ..errors import ConfigError
from ..images import Frame
from ..loop import Placed
from ..roles.contract import Decision
from .inputs import point_at

__all__ = ["place_actions"]


def place_actions(
    decision: Decision,
    frame: Frame,
    point: tuple[float, float] | None,
    to_point: tuple[float, float] | None,
    *,
    grounded: bool,
    has_localizer: bool,
) -> list[Placed]:
    """Where each action of the reply acts, in pixels of ``frame``'s screenshot: ``point`` and
    ``to_point`` (the caller's) for the first, else the reply's own points, else None (the localizer
    places it during the step). A ConfigError when an action needs a point and no localizer is
    configured (a grounded scroll without one turns the wheel at the page's centre)."""
    places: list[Placed] = []
    for i, (action, spot) in enumerate(zip(decision.reply.actions, decision.spots, strict=True)):
        wanted = points_of(action)
        given = (point, to_point) if i == 0 and point is not None else (spot.point, spot.target)
        if wanted == 0 and not (isinstance(action, Scroll) and given[0] is not None):
            places.append(Placed())
            continue
        missing = given[0] is None or (wanted == 2 and given[1] is None)
        if missing and not grounded and not has_localizer:
            needs = "point=(x, y) and to_point=(x, y)" if wanted == 2 else "point=(x, y)"
            raise ConfigError(f"no localizer model is configured: pass {needs} to step() or configure [localizer]")
        places.append(
            Placed(
                point_at(frame, given[0]) if given[0] is not None else None,
                point_at(frame, given[1]) if given[1] is not None and wanted == 2 else None,
            )
        )
    return places
