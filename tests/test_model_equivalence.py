"""The timed golden model does exactly what it did when tests/model_digests.json was recorded: for each
run of tests/model_trace.py, the same messages sent and delivered at the same cycles, the same summary,
and, for the runs broken on purpose, the same error at the same cycle.  A change meant only to make the
model faster must keep these; one meant to change behaviour records them again
(``python tests/model_trace.py --write``) and says why in its commit."""

import json

import pytest

from model_trace import DIGESTS, FAILING, RUNS, digest

RECORDED = json.loads(DIGESTS.read_text())


@pytest.mark.parametrize("name, cfg, transactions, seed", RUNS, ids=[r[0] for r in RUNS])
def test_same_messages_and_summary(name, cfg, transactions, seed):
    got = digest(cfg, transactions, seed)
    want = RECORDED[name]
    assert got["error"] is None, f"{name} (seed {seed}) failed: {got['error']}"
    assert (got["events"], got["trace"]) == (want["events"], want["trace"]), \
        f"{name} (seed {seed}): the message trace differs from the recorded one"
    assert got["summary"] == want["summary"], f"{name} (seed {seed}): same messages, different summary"


@pytest.mark.parametrize("name, mutate, broken, transactions, seed", FAILING, ids=[r[0] for r in FAILING])
def test_same_error_at_the_same_cycle(name, mutate, broken, transactions, seed):
    got = digest({}, transactions, seed, mutate, broken)
    want = RECORDED[f"mutation: {name}"]
    assert got["error"] == want["error"], f"{name} (seed {seed}): error {got['error']}, recorded {want['error']}"
    assert (got["events"], got["trace"]) == (want["events"], want["trace"]), \
        f"{name} (seed {seed}): the message trace up to the error differs from the recorded one"
