"""Which records let the shipped model rank the schedules of the AVX512-BF16 dot product (AMD Zen 4's bf16 unit)?

On a CPU with AVX512-BF16 and no AMX, ``--precision auto`` tensorises bf16 convolutions onto the dot product
(``vdpbf16ps``), not onto AMX tiles: other blocks, other tensor features. A pre-trained model guides a unit's tasks
only where its records hold that unit's schedules (``tensor_units`` in its manifest); until then they run unguided.
With no AMD Zen 4 at hand, the records come from an Intel Xeon with AMX measuring for a target of its features less
AMX (``train-model --measure --precision bf16 --target '{"kind": "llvm", "mattr": ["+avx512bf16", "+avx512vnni"],
"num-cores": 2}'``), the stand-in the results use for that path. This measures, on the dot-product tasks of a
network none of the models was trained on (``--test``: YOLO11n's, but those of layers the training logs hold),
pairwise accuracy and top-1 within each task of ``xgb-rank`` on the loop features, trained on:

- ``shipped records``: the ``--base`` logs (the shipped model's training set without dot-product records);
- ``shipped records + dot product``: and the ``--dot-product`` logs;
- ``dot product alone``: the ``--dot-product`` logs alone;

and, with ``--model NAME=DIR``, model directories as they are (the shipped model, and a candidate trained with the
dot-product records: ``train-model`` on the shipped model's logs plus ``--dot-product``'s). The two refit
models that hold dot-product records are also scored on the ``--dot-product`` tasks held out by task (5 folds).

    python -m experiments.dot_product_ranking --base experiments/results/dataset-pretrain.jsonl.gz \\
        --base experiments/results/dataset-pretrain-xeon.jsonl.gz \\
        --base experiments/results/dataset-bf16-xeon-amx.jsonl.gz \\
        --base experiments/results/dataset-attention-xeon-amx.jsonl.gz \\
        --dot-product experiments/results/dataset-dot-product-standin.jsonl.gz \\
        --test experiments/results/dataset-dot-product-standin-yolo11n.jsonl.gz \\
        --model "shipped=cost_models/pretrained_model" --model "candidate with dot-product records=DIR" \
        --out dot-product-ranking

Whether the Intel core's ranks hold on Zen 4 (whose dot product multiplies at twice the FMA's rate, where this
core's runs at half) is measured only there; across families the fp32 ranks held (``docs/cost-models.md``).
"""

from __future__ import annotations

import sys

import numpy as np

from experiments.attention_ranking import as_is, held_out, joined, ranking_main
from experiments.tensor_features import Records, scores

MODELS = ("shipped records", "shipped records + dot product", "dot product alone")
VARIANT = "bf16 records, with tensor features"  # all of the loop features: what train-model trains
TEST = "YOLO11n's dot-product tasks"


def tensorised(records: Records, *, unseen_by: tuple[Records, ...] = ()) -> np.ndarray:
    """The groups of ``records`` whose schedules are tensorised onto a bf16 unit, but for tasks ``unseen_by``'s
    records hold (YOLO11n shares layers with YOLOv8n: those are not another network's)."""
    seen = {key for other in unseen_by for key in other.keys}
    return np.flatnonzero(records.bf16 & np.asarray([key not in seen for key in records.keys]))


def evaluate(base: Records, dot: Records, test: Records, *, seed: int,
             models: dict[str, str] | None = None) -> dict[str, dict[str, dict]]:
    groups = tensorised(test, unseen_by=(base, dot))
    out: dict[str, dict[str, dict]] = {name: {TEST: as_is(directory, test, groups)}
                                       for name, directory in (models or {}).items()}
    for name, train in {MODELS[0]: base, MODELS[1]: joined([base, dot]), MODELS[2]: dot}.items():
        out[name] = {TEST: scores(train, np.arange(len(train.keys)), test, groups, VARIANT, seed=seed)}
        if name != MODELS[0]:
            offset = len(base.keys) if name == MODELS[1] else 0  # the dot-product groups follow the base ones
            out[name]["dot-product tasks held out"] = held_out(train, tensorised(dot) + offset, seed=seed)
    return out


def main(argv: list[str] | None = None) -> int:
    return ranking_main(argv, description=__doc__.splitlines()[0], added="dot-product",
                        helps=("training log without dot-product records", "training log of dot-product records",
                               "log of another network's dot-product tasks"),
                        evaluate=evaluate, title="ranking the dot product's schedules")


if __name__ == "__main__":
    sys.exit(main())
