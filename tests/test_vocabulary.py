"""The names and small helpers every layer shares: drafter modes, multiline policies,
percentiles, and pygls objects as plain data."""

from __future__ import annotations

import random
from collections import namedtuple

import pytest
from lsprotocol import types

from engine.drafters import make_drafter
from engine.errors import ConfigError
from engine.modes import DRAFTER_MODES, check_drafter, multiline_flag, needs_draft_model
from engine.stats import percentile
from lsp_server.wire.plain_data import plain_data
from lsp_server.workspace.settings import Settings, apply_client_settings
from lsp_server.workspace.telemetry import Telemetry


def test_drafter_modes_and_which_need_a_draft_model():
    assert [mode for mode in DRAFTER_MODES if needs_draft_model(mode)] == ["hybrid", "draft", "hybrid-tree", "draft-tree"]
    assert check_drafter("lookup") == "lookup"


def test_an_unknown_drafter_is_one_error_everywhere():
    with pytest.raises(ConfigError, match="unknown drafter 'telepathy'; choose one of hybrid, lookup, draft, medusa, feature, "
                                          "hybrid-tree, lookup-tree, draft-tree, none"):
        check_drafter("telepathy")
    with pytest.raises(ConfigError, match="unknown drafter 'telepathy'"):
        make_drafter("telepathy")
    assert isinstance(ConfigError("x"), ValueError)  # callers that caught ValueError still do


def test_multiline_policies():
    assert [multiline_flag(p) for p in ("auto", "always", "never")] == [None, True, False]
    with pytest.raises(ConfigError, match="unknown multiline policy 'sometimes'"):
        multiline_flag("sometimes")


def test_settings_accept_only_known_modes_and_policies():
    settings = apply_client_settings(Settings(), {"drafter": "telepathy", "multiline": "sometimes"})
    assert settings.drafter == "hybrid" and settings.multiline == "auto"  # logged and ignored
    settings = apply_client_settings(Settings(), {"drafter": "lookup", "multiline": "never"})
    assert settings.drafter == "lookup" and settings.multiline == "never"
    assert Settings(draft="x", drafter="lookup").model_key()[1] == "none"  # lookup loads no draft model
    assert Settings(draft="x", drafter="hybrid").model_key()[1] == "x"
    assert apply_client_settings(Settings(), {"drafter": "medusa"}).drafter == "medusa"
    assert Settings(draft="x", drafter="medusa").model_key()[1] == "none"  # the heads need no draft model
    assert Settings(draft="x", drafter="hybrid-tree").model_key()[1] == "x"


def test_percentile_is_nearest_rank():
    ten = [float(v) for v in range(1, 11)]
    assert [percentile(ten, q) for q in (0, 10, 50, 90, 99, 100)] == [1.0, 1.0, 5.0, 9.0, 10.0, 10.0]
    hundred = [float(v) for v in range(100, 0, -1)]  # order does not matter
    assert [percentile(hundred, q) for q in (29, 50, 90, 99)] == [29.0, 50.0, 90.0, 99.0]
    assert percentile([], 50) is None and percentile([7.0], 1) == 7.0
    rng = random.Random(0)
    sample = [rng.expovariate(0.01) for _ in range(37)]
    assert percentile(sample, 50) <= percentile(sample, 90) <= percentile(sample, 99) <= max(sample)
    assert all(percentile(sample, q) in sample for q in range(0, 101, 7))


def test_server_stats_use_the_same_percentile_as_the_benchmark():
    telemetry = Telemetry()
    for latency in range(10, 0, -1):
        telemetry.latencies.append(float(latency))
    assert telemetry.snapshot("lookup")["latencyMs"] == {"p50": 5.0, "p90": 9.0, "p99": 10.0}


def test_plain_data_from_pygls_objects():
    Inner = namedtuple("Object", ["id", "acceptedLength"])
    Outer = namedtuple("Object", ["items", "meta"])
    value = Outer(items=(Inner("a", 3), Inner("b", 0)), meta={"n": Inner("c", 1)})
    assert plain_data(value) == {"items": [{"id": "a", "acceptedLength": 3}, {"id": "b", "acceptedLength": 0}],
                                 "meta": {"n": {"id": "c", "acceptedLength": 1}}}
    position = types.Position(line=2, character=5)
    assert plain_data(types.Range(start=position, end=position)) == {
        "start": {"line": 2, "character": 5}, "end": {"line": 2, "character": 5}}
    assert plain_data(None) is None and plain_data("id-1") == "id-1" and plain_data(4) == 4
