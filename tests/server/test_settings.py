"""Settings in-process: machine defaults < command-line flags < the client's settings."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

from lsp_server.cli import build_parser
from lsp_server.cli.serve import settings_from_args
from lsp_server.workspace.settings import SETTINGS, Settings, apply_client_settings, client_settings, machine_defaults


def test_client_names_are_camel_case_and_may_be_nested_in_a_section():
    flat = apply_client_settings(Settings(), {"budgetMs": 150, "maxNewTokens": 20, "adaptiveDrafting": False})
    nested = apply_client_settings(Settings(), {"quickdraft": {"budgetMs": 150, "maxNewTokens": 20,
                                                               "adaptiveDrafting": False}})
    assert flat == nested
    assert (flat.budget_ms, flat.max_new_tokens, flat.adaptive_drafting) == (150.0, 20, False)
    assert isinstance(flat.budget_ms, float) and isinstance(flat.max_new_tokens, int)


def test_client_settings_overlay_the_flags_they_name_and_keep_the_rest():
    flags = Settings(verifier="qwen2.5-coder-0.5b", drafter="lookup", budget_ms=300.0)
    merged = apply_client_settings(flags, {"budgetMs": 100, "unknownSetting": 1})
    assert merged == Settings(verifier="qwen2.5-coder-0.5b", drafter="lookup", budget_ms=100.0)


def test_wrong_values_are_logged_and_ignored(caplog):
    bad = {"budgetMs": "fast", "maxNewTokens": 0, "prefixTokens": 10**9, "enabled": "yes", "multiline": "sometimes",
           "disabledLanguages": "python", "verifier": 7, "drafter": "telepathy", "suffixTokens": True}
    with caplog.at_level(logging.WARNING, logger="lsp_server.workspace.settings"):
        assert apply_client_settings(Settings(), bad) == Settings()
    assert len(caplog.records) == len(bad)
    assert apply_client_settings(Settings(), None) == Settings() and apply_client_settings(Settings(), [1]) == Settings()


def test_languages_and_the_switch():
    settings = apply_client_settings(Settings(), {"disabledLanguages": ["markdown", "plaintext"]})
    assert settings.disabled_languages == ("markdown", "plaintext")
    assert settings.language_enabled("python") and settings.language_enabled(None)
    assert not settings.language_enabled("markdown")
    assert not apply_client_settings(settings, {"enabled": False}).language_enabled("python")


def test_model_key_changes_only_with_what_needs_a_reload():
    base = Settings(verifier="v", draft="d", drafter="hybrid")
    assert apply_client_settings(base, {"budgetMs": 50, "multiline": "never"}).model_key() == base.model_key()
    assert apply_client_settings(base, {"drafter": "draft"}).model_key() == base.model_key()
    assert apply_client_settings(base, {"drafter": "lookup"}).model_key() != base.model_key()  # the draft is dropped
    assert apply_client_settings(base, {"verifier": "other"}).model_key() != base.model_key()
    assert apply_client_settings(base, {"verifier": ""}).verifier is None  # empty: back to the machine default


def test_every_setting_takes_its_own_default_and_its_client_name_is_camel_case():
    for spec in SETTINGS:
        assert spec.client_name == re.sub(r"_(\w)", lambda m: m.group(1).upper(), spec.name)
        if spec.default is not None:
            value = list(spec.default) if isinstance(spec.default, tuple) else spec.default
            assert apply_client_settings(Settings(), {spec.client_name: value}) == Settings(), spec.name
    assert client_settings(Settings(disabled_languages=("markdown",)))["disabledLanguages"] == ["markdown"]
    assert apply_client_settings(Settings(), client_settings(Settings(budget_ms=5.0))) == Settings(budget_ms=5.0)


def test_whole_numbers_stay_whole(caplog):
    assert apply_client_settings(Settings(), {"maxNewTokens": 20.0}).max_new_tokens == 20
    with caplog.at_level(logging.WARNING, logger="lsp_server.workspace.settings"):
        assert apply_client_settings(Settings(), {"maxNewTokens": 20.5, "prefixTokens": float("nan")}) == Settings()
    assert len(caplog.records) == 2


def test_the_machine_picks_the_models_and_the_drafter():
    assert machine_defaults("cpu").drafter == "lookup" and machine_defaults("gpu").drafter == "hybrid"
    assert machine_defaults("cpu").budget_ms == machine_defaults("gpu").budget_ms == Settings().budget_ms
    assert machine_defaults() in (machine_defaults("cpu"), machine_defaults("gpu"))


def test_serve_flags_overlay_the_machine_defaults():
    args = build_parser().parse_args(["serve", "--drafter", "none", "--budget-ms", "150", "--no-warm",
                                      "--max-new-tokens", "9"])
    assert settings_from_args(args) == replace(machine_defaults(), drafter="none", budget_ms=150.0, warm=False,
                                               max_new_tokens=9)
    assert settings_from_args(build_parser().parse_args(["serve"])) == machine_defaults()
