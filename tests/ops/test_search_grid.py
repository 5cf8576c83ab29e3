"""The 1-D search: a grid whose best point sits at its edge is followed past it, a flat or interior
grid is left alone, and the refined minimum lands where the function's minimum is."""

import math

import pytest

from attntemp.ops.search import best_at_edge, grid_then_golden, widen_grid


def counted(f):
    """``f`` on a list of points, each call's points recorded."""
    calls: list[list[float]] = []

    def g(xs: list[float]) -> list[float]:
        calls.append(list(xs))
        return [f(x) for x in xs]

    return g, calls


@pytest.mark.parametrize(
    ("ys", "edge"),
    [
        ([3.0, 2.0, 1.0], True),  # falling: the best is the high end
        ([1.0, 2.0, 3.0], True),  # rising: the low end
        ([2.0, 1.0, 3.0], False),  # interior
        ([1.0, 1.0, 1.0], False),  # flat: no direction to follow
        ([1.0, 1.0, 2.0], False),  # the end ties an interior point
        ([2.0, 1.0], True),  # two points: no interior
    ],
)
def test_best_at_edge(ys, edge):
    assert best_at_edge(ys) is edge


@pytest.mark.parametrize(
    ("centre", "steps", "added"),
    [
        (1.5, 3, [1.5, 2.0]),  # rising past the high end: two steps, then the best is interior
        (-0.7, 3, [-0.5, -1.0]),  # past the low end
        (0.4, 3, []),  # best inside: nothing added
        (9.0, 2, [1.5, 2.0]),  # far out: the budget runs out, still at the edge
        (9.0, 0, []),  # no budget
    ],
)
def test_widen_grid_follows_the_best_point(centre, steps, added):
    f, calls = counted(lambda x: (x - centre) ** 2)
    xs0 = [0.0, 0.5, 1.0]
    xs, ys = widen_grid(f, xs0, f(xs0), steps)
    assert [c[0] for c in calls[1:]] == pytest.approx(added)  # one new point a call
    assert xs == sorted(xs) and len(xs) == 3 + len(added)
    assert ys == pytest.approx([(x - centre) ** 2 for x in xs])
    assert best_at_edge(ys) is (centre == 9.0)


@pytest.mark.parametrize("centre", [0.3, 1.3, -0.4])
def test_grid_then_golden_finds_a_minimum_inside_or_past_the_bracket(centre):
    f, _ = counted(lambda x: (x - centre) ** 2 + 1.0)
    best, xs, ys = grid_then_golden(f, 0.0, 1.0, grid=3, iters=30, widen=3)
    assert best == pytest.approx(centre, abs=1e-4)
    assert not best_at_edge(ys) and xs[0] <= best <= xs[-1]


def test_grid_then_golden_keeps_the_grid_point_when_refining_finds_nothing_lower():
    f, _ = counted(lambda x: 0.0 if math.isclose(x, 0.5) else 1.0)  # a spike only the grid sees
    best, _, _ = grid_then_golden(f, 0.0, 1.0, grid=3, iters=4)
    assert best == 0.5
