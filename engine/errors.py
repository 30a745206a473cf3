"""Errors a user can hit. Their message says what happened and what to do."""


class QuickdraftError(Exception):
    """Base class: the CLI prints the message on one line, the server logs it and answers empty."""


class ModelError(QuickdraftError):
    """A model could not be found, fetched, verified or loaded, or a pair does not fit together."""


class PromptError(QuickdraftError):
    """The prompt cannot be decoded (empty, or unusable for the model)."""


class ConfigError(QuickdraftError, ValueError):
    """An option or setting names something quickdraft does not know (a drafter, a policy)."""
