"""Models: presets and the local store (`registry`), loading for inference (`loading`),
and tiny random models for tests and client checks (`tiny`)."""
