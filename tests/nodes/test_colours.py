"""Every shipped node draws in its category's palette colour."""

from __future__ import annotations


def test_every_discovered_node_has_a_palette_colour_by_category() -> None:
    from orchestrator.service.plugins import category_colours, colour_of, load_registry
    from orchestrator.settings import load_settings

    registry = load_registry(load_settings())
    table = category_colours()
    assert {"trigger", "agents", "flow", "data", "rag", "integration"} <= set(table)
    for node_type in registry:
        colour = colour_of(node_type.definition)
        assert colour.startswith("#"), node_type.id
        if node_type.definition.category in table:
            assert colour == table[node_type.definition.category], node_type.id
    assert colour_of(registry.get("agent").definition) != colour_of(registry.get("merge").definition)

