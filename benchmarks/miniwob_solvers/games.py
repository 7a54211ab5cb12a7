"""Tic-tac-toe against the page's player, who plays at random 55 % of the time and otherwise wins
or blocks when it can: X moves that maximise the chance of winning against exactly that player."""

from __future__ import annotations

import functools

from .play import Play, Stuck
from .registry import solves

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
RANDOM = 0.55


def winner(board: tuple[int, ...]) -> int:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return 0


def _completing(board: tuple[int, ...], mark: int) -> list[int]:
    """The cells that complete a line of two ``mark``s."""
    out = []
    for line in LINES:
        marks = [board[i] for i in line]
        if marks.count(mark) == 2 and marks.count(0) == 1:
            out.append(line[marks.index(0)])
    return out


@functools.cache
def chance(board: tuple[int, ...], x_to_move: bool) -> float:
    """X's chance to win from ``board`` (1: X, -1: O, 0: free)."""
    w = winner(board)
    if w:
        return 1.0 if w == 1 else 0.0
    free = [i for i in range(9) if board[i] == 0]
    if not free:
        return 0.0
    if x_to_move:
        return max(chance(_put(board, i, 1), False) for i in free)
    uniform = sum(chance(_put(board, i, -1), True) for i in free) / len(free)
    smart = _completing(board, -1) or _completing(board, 1)
    if not smart:
        return uniform  # nothing to win or block: the page plays at random anyway
    # The page picks the last line found; any of them is close enough for the odds.
    aimed = chance(_put(board, smart[-1], -1), True)
    return RANDOM * uniform + (1 - RANDOM) * aimed


def _put(board: tuple[int, ...], i: int, mark: int) -> tuple[int, ...]:
    return (*board[:i], mark, *board[i + 1 :])


BOARD = (
    "[...Array(9).keys()].map((i) => { const c = $('#ttt-' + i).className; "
    "return c.includes('mark-x') ? 1 : c.includes('mark-o') ? -1 : 0; })"
)


@solves("tic-tac-toe")
async def tic_tac_toe(p: Play) -> None:
    for _ in range(5):
        board = tuple(await p.read(BOARD))
        free = [i for i in range(9) if board[i] == 0]
        if not free:
            raise Stuck("the board is full")
        best = max(free, key=lambda i: chance(_put(board, i, 1), False))
        await p.click("$('#ttt-' + arg)", best)
    raise Stuck("no win after five moves")
