"""``experiments/attention_zoo.py`` and ``experiments/attention_ranking.py``: the attention records' model, and the
record sets the ranking experiment joins and splits by task kind."""

from __future__ import annotations

import numpy as np


def test_the_zoo_lowers_to_one_fused_attention_per_shape_none_of_yolo12ns(tmp_path) -> None:
    """Lowering only (any CPU): on AMX each of the zoo's attentions is one fused bf16 task of its own shape."""
    import onnx

    from autosearch.frontend.importer import import_model
    from autosearch.tensor_units.attention import TASK_NAME
    from experiments.attention_zoo import SHAPES, attention_zoo
    from tests.bf16_models import amx_target

    path = str(tmp_path / "zoo.onnx")
    onnx.save(attention_zoo(), path)
    tasks = [t for t in import_model(path, amx_target(), layout="NHWC", precision="bf16").tasks
             if TASK_NAME in t.name]
    queries = sorted(tuple(t.args[0][0]) for t in tasks)  # q: (*batch, queries, channels)
    assert queries == sorted((*batch, m, d) for batch, m, _, d in SHAPES)
    assert not {(4, 2, 400, 32), (1, 4, 400, 32)} & set(queries)  # YOLO12n's stay unseen


def test_record_sets_join_with_their_groups_renumbered_and_split_by_task_kind() -> None:
    from experiments.attention_ranking import joined, of_kind
    from experiments.tensor_features import Records

    def records(names, rows_per_group=3):
        groups = np.repeat(np.arange(len(names)), rows_per_group)
        return Records(X=np.arange(len(groups) * 2, dtype=float).reshape(-1, 2), y=np.ones(len(groups)),
                       groups=groups, keys=[f"k{n}" for n in names], bf16=np.ones(len(names), bool), names=names)

    a = records(["conv2d_bf161", "attention_bf162"])
    b = records(["attention_bf163", "matmul_bf164", "attention_bf165"])
    both = joined([a, b])
    assert list(np.unique(both.groups)) == [0, 1, 2, 3, 4] and len(both.y) == 15
    assert both.names[2:] == b.names and np.array_equal(both.X[6:], b.X)
    assert list(of_kind(both, "attention_bf16")) == [1, 2, 4]
    assert list(of_kind(both, "matmul_bf16")) == [3]
