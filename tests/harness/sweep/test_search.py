"""The --find-max search on synthetic servers: it brackets and bisects to within the tolerance,
uses the saturated top's achieved rate as its first guess, stops at the range's ends, and
never reruns a load."""

from __future__ import annotations

import math

import pytest

from harness.sweep.search import Outcome, SearchSettings, boundary, next_load


def server(limit: float, capacity: float, slope: float = 40.0):
    """A point at `load`: attainment falls from 1 to 0 around `limit` (steeply: `slope` per unit of
    log load); an open-loop point completes at most `capacity` requests/s."""

    def run(load: float) -> Outcome:
        attainment = 1 / (1 + math.exp(slope * math.log(load / limit) - math.log(9)))  # 0.9 at limit
        return Outcome(load, attainment, attainment >= 0.9, min(load, capacity))

    return run


def search(s: SearchSettings, run) -> tuple[list[Outcome], float | None]:
    done: list[Outcome] = []
    while (load := next_load(s, done)) is not None:
        assert load not in {o.load for o in done}, "a load ran twice"
        done.append(run(load))
    return done, boundary(s, done).best


@pytest.mark.parametrize(
    ("limit", "capacity"), [(2.7, 2.6), (3.1, 2.6), (2.3, 2.6), (7.5, 7.0), (1.2, 1.1), (4.4, 4.0)]
)
def test_open_loop_finds_the_limit_within_the_tolerance_in_few_points(limit, capacity):
    s = SearchSettings("rate", 0.5, 10.0, 0.9)
    done, best = search(s, server(limit, capacity))
    assert best is not None and limit / 1.1 <= best <= limit + 1e-9, (best, [o.load for o in done])
    assert len(done) <= 5, [o.load for o in done]


def test_without_an_achieved_rate_it_starts_halfway_and_still_converges():
    s = SearchSettings("rate", 1.0, 64.0, 0.9)

    def run(load: float) -> Outcome:
        return Outcome(load, 1.0 if load <= 5.0 else 0.2, load <= 5.0)

    done, best = search(s, run)
    assert done[1].load == 8.0  # sqrt(1 x 64)
    assert 5.0 / 1.1 <= best <= 5.0 and len(done) <= 8


def test_closed_loop_bisects_on_whole_users():
    s = SearchSettings("concurrency", 1, 64, 0.9)
    done, best = search(s, lambda c: Outcome(c, 1.0 if c <= 11 else 0.5, c <= 11))
    assert best == 11 and all(o.load == int(o.load) for o in done)
    assert boundary(s, done).first_failing == 12


def test_a_top_that_meets_the_slos_ends_the_search():
    s = SearchSettings("rate", 1, 8, 0.9)
    done, best = search(s, lambda r: Outcome(r, 1.0, True, r))
    assert [o.load for o in done] == [8.0] and best == 8.0
    assert "search higher" in boundary(s, done).reason


def test_nothing_met_down_to_the_bottom():
    s = SearchSettings("rate", 2, 16, 0.9)
    done, best = search(s, lambda r: Outcome(r, 0.1, False, 0.5))
    assert best is None and min(o.load for o in done) == 2
    assert boundary(s, done).reason == "no load down to 2 met the SLOs"


def test_the_points_limit_holds():
    s = SearchSettings("rate", 0.01, 1000, 0.9, tolerance=0.001, max_points=4)
    done, _ = search(s, server(3.0, 2.9))
    assert len(done) == 4


def test_the_first_guess_allows_for_the_queue_a_short_point_builds():
    # achieved 6/s at the top; a 6 s point keeps 90% of TTFTs within 2 s up to 6 x (1 + 2 / 5.4)
    s = SearchSettings("rate", 3, 12, 0.9, ttft_slo_s=2.0, duration_s=6.0)
    first = next_load(s, [Outcome(12.0, 0.72, False, 6.0)])
    assert first == pytest.approx(6 * (1 + 2 / 5.4), rel=1e-3)
    no_slo = SearchSettings("rate", 3, 12, 0.9)
    assert next_load(no_slo, [Outcome(12.0, 0.72, False, 6.0)]) == 6.0
