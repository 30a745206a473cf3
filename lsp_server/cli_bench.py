"""Placeholder: registers no subcommand yet."""


def add_parsers(sub) -> None:
    return None
