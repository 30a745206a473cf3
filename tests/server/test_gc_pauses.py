"""The models' objects are frozen out of the garbage collector's sight once loaded
(lsp_server/workspace/gc_pauses.py): full collections then scan only what requests make, not the models,
so they do not stop the server for a quarter second. A real tiny model in the real service."""

from __future__ import annotations

import gc
import weakref

import pytest

from test_service import Editor, make_service

pytestmark = pytest.mark.timeout(300)


def tracked(obj) -> bool:
    """Whether a collection would scan `obj` (frozen objects are in no generation)."""
    return any(o is obj for o in gc.get_objects())


async def test_loaded_models_are_frozen_replaced_ones_freed_and_pauses_measured(tiny_model_dir, tiny_draft_dir):
    editor = Editor()
    service = make_service(editor, verifier=str(tiny_model_dir))
    try:
        await service.load_models()
        model = service.backend.engine.verifier.model
        assert gc.get_freeze_count() > 0 and not tracked(model) and not tracked(service.backend.engine)

        gc.collect()  # a full collection while the models serve is measured
        collector = service.stats()["collector"]
        assert collector["fullCollections"] >= 1 and collector["frozenObjects"] == gc.get_freeze_count()

        # Other models: the old ones are thawed and freed, the new ones frozen. A reference cycle
        # (hooks and backends make them) is freed only by a collection, which a frozen one never sees.
        service.backend.engine.itself = service.backend.engine
        old = weakref.ref(service.backend.engine)
        service.configure({"verifier": str(tiny_draft_dir)})
        await service._load_task
        gc.collect()
        assert old() is None and service.backend.engine is not None and not tracked(service.backend.engine)
    finally:
        service.shutdown()
    assert gc.get_freeze_count() == 0  # nothing stays frozen for a service that has ended
    assert service.collector._observe not in gc.callbacks
