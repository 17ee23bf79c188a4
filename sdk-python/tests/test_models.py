"""``lanes.models`` is the public module of the generated wire models the README points at."""

from __future__ import annotations

import importlib
import inspect

import lanes


def test_lanes_models_is_an_importable_module_with_every_generated_model() -> None:
    public = importlib.import_module("lanes.models")  # ModuleNotFoundError if it is no module
    generated = importlib.import_module("lanes._generated.models")
    classes = {
        name
        for name, value in vars(generated).items()
        if inspect.isclass(value) and value.__module__ == generated.__name__
    }
    assert len(classes) > 100
    missing = sorted(n for n in classes if getattr(public, n, None) is not getattr(generated, n))
    assert missing == []
    assert lanes.models is public


def test_from_lanes_models_import_names_the_classes_admin_results_are(broker_url: str) -> None:
    from lanes.models import Maintenance, Overview, QueueList

    with lanes.Lanes(broker_url) as client:
        assert isinstance(client.admin.get_overview(), Overview)
        assert isinstance(client.admin.list_queues(), QueueList)
        assert isinstance(client.admin.get_maintenance_mode(), Maintenance)
