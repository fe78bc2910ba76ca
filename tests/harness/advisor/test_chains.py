"""Which closed-loop user sent each request, and the gap it waited: from recorded user ids,
rebuilt from the timings of an older bundle, and none for an open-loop run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.advisor.chains import closed_loop, find_chains

CLOSED = {"config": {"workload": "chat", "rate": 0.0, "users": 2}}


def _two_users(with_ids: bool, server: bool = True) -> pd.DataFrame:
    """User a sends at 0, 2.1, 4.3; user b at 0.5, 1.6, 3.0; each request 0.1 s after the
    user's previous answer ended on the client; rows shuffled."""
    rows = []
    users = (("a", (0.0, 2.1, 4.3), (2.0, 2.1, 1.0)), ("b", (0.5, 1.6, 3.0), (1.0, 1.3, 1.2)))
    for user, sends, e2es in users:
        for s, e in zip(sends, e2es):
            rows.append(
                {
                    "user_id": user if with_ids else None,
                    "send_time_unix": 1000 + s,
                    "e2e_s": e,
                    # the server sees each request 5 ms later and ends it 5 ms before the client
                    "server_arrival_unix": 1000 + s + 0.005 if server else np.nan,
                    "server_e2e_s": e - 0.01 if server else np.nan,
                }
            )
    return pd.DataFrame(rows).sample(frac=1.0, random_state=1).reset_index(drop=True)


def _by_user(frame: pd.DataFrame, chains) -> dict[tuple[float, ...], list[float]]:
    out: dict[tuple[float, ...], list[float]] = {}
    for c in set(chains.chain.tolist()):
        idx = np.flatnonzero(chains.chain == c)
        idx = idx[np.argsort(frame["send_time_unix"].to_numpy()[idx])]
        key = tuple(round(float(frame["send_time_unix"].iloc[i]) - 1000, 2) for i in idx)
        out[key] = [round(float(chains.after_s[i]), 4) for i in idx]
    return out


def test_recorded_user_ids_make_the_chains_and_the_server_clock_the_gaps() -> None:
    frame = _two_users(with_ids=True)
    chains = find_chains(frame, CLOSED)
    assert chains.source == "user_id" and chains.users == 2
    # gap = next arrival - previous server end = (send + 0.005) - (send' + 0.005 + e2e' - 0.01)
    assert _by_user(frame, chains) == {(0.0, 2.1, 4.3): [0.0, 0.11, 0.11], (0.5, 1.6, 3.0): [0.0, 0.11, 0.11]}


def test_without_server_timings_the_gaps_are_the_clients() -> None:
    frame = _two_users(with_ids=True, server=False)
    assert _by_user(frame, find_chains(frame, CLOSED)) == {
        (0.0, 2.1, 4.3): [0.0, 0.1, 0.1],
        (0.5, 1.6, 3.0): [0.0, 0.1, 0.1],
    }


def test_an_older_bundle_has_its_chains_rebuilt_from_the_timings() -> None:
    frame = _two_users(with_ids=False)
    chains = find_chains(frame, CLOSED)
    assert chains.source == "rebuilt" and chains.users == 2
    assert set(_by_user(frame, chains)) == {(0.0, 2.1, 4.3), (0.5, 1.6, 3.0)}


def test_an_open_loop_run_has_no_chains() -> None:
    frame = _two_users(with_ids=True)
    for run in ({"config": {"workload": "chat", "rate": 2.0}}, {"config": {"workload": "replay"}}, {}):
        assert not closed_loop(run)
        chains = find_chains(frame, run)
        assert chains.source == "open_loop" and (chains.chain == -1).all() and chains.users == 0


@pytest.mark.parametrize("users", [1, None])
def test_rebuilding_never_makes_more_chains_than_the_run_had_users(users) -> None:
    frame = _two_users(with_ids=False)
    run = {"config": {"workload": "chat", "rate": 0.0, "users": users}}
    chains = find_chains(frame, run)
    assert chains.users == (1 if users == 1 else 2)
    assert (chains.after_s >= 0).all()


def test_an_open_loop_runs_conversations_are_chains_and_its_other_requests_are_not() -> None:
    frame = _two_users(with_ids=True).assign(session_id=lambda f: f["user_id"].map({"a": "s1", "b": None}))
    chains = find_chains(frame, {"config": {"workload": "replay"}})
    assert chains.source == "session_id" and chains.users == 1
    in_session = frame["session_id"].notna().to_numpy()
    assert (chains.chain[~in_session] == -1).all() and (chains.after_s[~in_session] == 0).all()
    assert sorted(chains.after_s[in_session].round(4).tolist()) == [0.0, 0.11, 0.11]
