"""Rewrite ``tests/data/small_dataset_features/``: the committed dataset's features, as the cost-model tests read them.

Featurising the committed dataset takes a minute of an LLVM build per record (its assembly features), in every test
session, on every worker that needs it; its tasks' target is the one in the log, not the host's, so the features are
the same on every machine with the same TVM, and are committed instead. ``test_committed_features.py`` checks them
against features computed afresh and fails, naming this command, once an extractor's output changes; under another
TVM (their keys name its version) the dataset fixture computes them itself and that test skips, saying so::

    python -m tests.data.refresh_features
"""

from __future__ import annotations

import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
DATASET = os.path.join(HERE, "small_dataset.jsonl")
STORE = os.path.join(HERE, "small_dataset_features")
SOURCE = os.path.join(STORE, "source.json")
KINDS = ("loop", "pooled", "asm")  # every extractor: the loop, PerStoreFeature and assembly features


def written_for() -> str | None:
    """The TVM version the committed features were computed with (None: no committed store)."""
    try:
        with open(SOURCE, encoding="utf-8") as fh:
            return json.load(fh)["tvm"]
    except (OSError, ValueError, KeyError):
        return None


def main() -> None:
    import tvm

    from autosearch.cost_models.feature_store import FeatureStore
    from autosearch.cost_models.features import build_dataset
    from autosearch.records import read_log

    shutil.rmtree(STORE, ignore_errors=True)
    dataset = build_dataset([read_log(DATASET)], kinds=KINDS, store=FeatureStore(STORE))
    with open(SOURCE, "w", encoding="utf-8") as fh:
        json.dump({"tvm": tvm.__version__, "records": len(dataset), "kinds": list(KINDS),
                   "command": "python -m tests.data.refresh_features"}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
