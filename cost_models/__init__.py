"""Cost-model plug-ins for autosearch (``autosearch.cost_models``): one module per model family, their features,
and the scorer that guides search with any of them.

``autosearch.search.cost_model``'s registry names each family's ``create``; the scorer is found here, on the
package (``scorer``), because one scorer serves every family: what it does for a task (featurise configs
and the warm start for the model's input kind, refit after each batch) depends on the model's input, not
on the model.
"""

from __future__ import annotations

from typing import Any

# what ``train-model`` trains and a pre-trained model directory may hold (here, not in
# ``autosearch.cost_models.pretrained``, so that the CLI's parser names them without importing NumPy)
PRETRAINED_FAMILIES = ("xgb-rank", "blend")

# The feature sets a model of this package can be fed, by name (``autosearch.cost_models.features`` computes them;
# named here so that the core reads them without importing NumPy or TVM). Fixed-length vectors, which any regressor
# takes:
TABULAR_KINDS = ("loop", "pooled", "pooled+loop", "asm", "loop+asm", "encoding")
# the sequence kinds: tokens of the trace, joined with the vector of this tabular kind (None: tokens alone)
SEQUENCE_KINDS = {"sequence": None, "sequence+loop": "loop", "sequence+loop+asm": "loop+asm"}
# what may follow '@' in a model's name (xgb@pooled, seq@sequence+loop): the core's
# ``autosearch.search.cost_model.FEATURE_SETS`` reads it here, through the registry
FEATURE_SETS = (*TABULAR_KINDS, *SEQUENCE_KINDS)


def scorer(model, space, task, **options: Any):
    """The ``ConfigScorer`` of one task for a model of this package: a
    :class:`autosearch.cost_models.guidance.ModelScorer`."""
    from autosearch.cost_models.guidance import ModelScorer

    return ModelScorer(model, space, task, **options)


def guides_unit(spec: str, unit: str) -> bool:
    """Whether the model ``spec`` guides the tasks tensorised onto the bf16 ``unit`` (the core asks through the
    registry: ``autosearch.search.cost_model.GUIDES_UNIT``). A pre-trained model does where its records hold such
    schedules (its manifest's ``tensor_units``): one of fp32 schedules ranks them no better than chance. A model
    trained online learns from the run's own measurements, those tasks' included."""
    from autosearch.search.cost_model import PRETRAINED, pretrained_model

    if not pretrained_model(spec):
        return True
    from autosearch.cost_models.pretrained import SHIPPED_DIR, covers, read_manifest

    return covers(read_manifest(SHIPPED_DIR if spec == PRETRAINED else spec), unit)
