"""Settings in-process: machine defaults < command-line flags < the client's settings."""

from __future__ import annotations

import logging

from lsp_server.workspace.settings import Settings, apply_client_settings


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
