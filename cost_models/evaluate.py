"""Cost-model evaluation: ranking metrics, leave-one-task-out and leave-one-model-out comparison, a table and a PNG.

Leave-one-task-out is the question a tuner asks of a model it brings to a new task: trained on
other kernels, does it order this kernel's configs? Leave-one-model-out (``split="model"``) asks it of a
new network: trained on the tasks of the other models (a task that is a layer of the held-out model too is
held out with it), does it order the held-out model's kernels? A record's model is its task's, from the
log's task header (``"models"``, which ``experiments/make_dataset.py`` writes). Metrics, all on the
held-out task, then averaged over tasks (each task counts once, however many records it has):

- pairwise accuracy: share of record pairs with different measured throughput that the model
  orders correctly (ties in the prediction count half); 0.5 is chance.
- Spearman's rho between predicted and measured throughput.
- top-k score (TenSet): best measured latency of the task / latency of the best config among the
  model's k highest-scored ones; 1.0 when the model's top k holds the task's best config.
- RMSE of normalised throughput (regressors only; rankers' scores have no scale).
- fit seconds per fold, and per record: fit time per training record, predict time per scored record (what
  scoring a guided search's candidate batch costs, features aside).

Entry point for the CLI (``python -m autosearch compare-models --log A --log B --models xgb,rf``)::

    report = compare_models(logs, models, seed=seed, out_png=png)
    console.print(report.table); open(md_path, "w").write(report.markdown)

A model name may carry a feature set: ``xgb@pooled`` fits xgb on TVM's pooled per-store features instead
of the loop features, ``xgb@encoding`` on decision encodings (the baseline showing what program
features add across tasks).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autosearch.errors import UserError

if TYPE_CHECKING:
    from autosearch.cost_models.feature_store import FeatureStore

log = logging.getLogger(__name__)

DEFAULT_MODELS = ("xgb", "xgb-rank", "rf", "gbr", "xgb@pooled", "tvm-xgb", "mlp", "tvm-mlp", "seq",
                  "seq@sequence+loop", "mlp-rank", "blend")
TOP_K = (1, 5)
SPLITS = ("task", "model")  # leave one task out, leave one model (network) out


# ---------------------------------------------------------------------------------------------- metrics
def agreeing(y_pred: np.ndarray, pairs: np.ndarray) -> float:
    """How many of ``pairs`` (a boolean matrix: ``pairs[i, j]`` when i is measured faster than j) ``y_pred`` puts the
    same way round (higher = faster); a tie in ``y_pred`` counts half. The one tie rule of every pairwise metric."""
    y_pred = np.asarray(y_pred, dtype=np.float64)
    sign = np.sign(y_pred[:, None] - y_pred[None, :])[pairs]
    return float((sign > 0).sum() + 0.5 * (sign == 0).sum())


def pairwise_accuracy(y_true: np.ndarray, y_pred: np.ndarray, groups: np.ndarray | None = None, *,
                      ratio: float = 1.0) -> float:
    """Share of pairs (same group, different ``y_true``) whose predicted order matches the measured one.

    Higher ``y`` = faster. Ties in ``y_pred`` count 0.5 (:func:`agreeing`). NaN when there is no such pair.
    ``ratio`` > 1 judges only the pairs whose ``y_true`` (a positive throughput) differ by more than that factor:
    closer pairs are mostly measurement noise (``ratio=1.1``: "pairs more than 10% apart").
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    groups = np.zeros(len(y_true), dtype=np.int64) if groups is None else np.asarray(groups)
    correct = 0.0
    total = 0
    for g in np.unique(groups):
        sel = groups == g
        pairs = y_true[sel][:, None] > ratio * y_true[sel][None, :]  # each pair once, oriented by the measured order
        total += int(pairs.sum())
        correct += agreeing(y_pred[sel], pairs)
    return correct / total if total else math.nan


def spearman(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Spearman's rank correlation; 0.0 when either side is constant (no order predicted)."""
    from scipy.stats import spearmanr

    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    if len(y_true) < 2 or np.ptp(y_true) == 0 or np.ptp(y_pred) == 0:
        return 0.0
    return float(spearmanr(y_true, y_pred).statistic)


def top_k_score(y_true: np.ndarray, y_pred: np.ndarray, k: int) -> float:
    """TenSet's top-k score for one task: best throughput among the model's top-k picks / best throughput.

    With ``y_true`` = throughput (or normalised throughput) this equals best latency of the task /
    latency of the best config among the k configs the model scores highest. Ties in ``y_pred`` are
    broken towards the *worse* config, so a constant predictor gets no credit for order.
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    order = np.lexsort((y_true, -y_pred))  # by score descending, then worst measured first
    return float(y_true[order[:k]].max() / y_true.max())


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(y_true, float) - np.asarray(y_pred, float)) ** 2)))


def task_metrics(y_true: np.ndarray, y_pred: np.ndarray, *, ranker: bool = False) -> dict[str, float]:
    """All metrics on one task's records (``y_true`` = normalised throughput)."""
    out = {
        "pairwise": pairwise_accuracy(y_true, y_pred),
        "spearman": spearman(y_true, y_pred),
        **{f"top{k}": top_k_score(y_true, y_pred, k) for k in TOP_K},
        "rmse": math.nan if ranker else rmse(y_true, y_pred),
    }
    return out


# ---------------------------------------------------------------------------------------------- results
@dataclass
class ModelResult:
    """Leave-one-task-out result of one model: per-task metrics, their means, out-of-fold predictions."""

    name: str
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)  # task name -> metrics
    fit_secs: float = 0.0  # mean per fold
    predict_secs: float = 0.0  # mean per fold
    fit_secs_per_record: float = 0.0  # all folds' fit time / all folds' training records
    predict_secs_per_record: float = 0.0  # all folds' predict time / all folds' held-out records
    y_pred: np.ndarray | None = None  # out-of-fold predictions, aligned with the dataset's rows
    error: str = ""
    folds: int = 0
    fit_records: int = 0  # training records, summed over folds
    predict_records: int = 0  # held-out records, summed over folds

    @classmethod
    def merged(cls, name: str, parts: Sequence[ModelResult]) -> ModelResult:
        """The result of all folds from the results of disjoint groups of them (each fold scored on its own,
        as a resumable comparison stores it): per-task metrics joined, times weighted as one run would."""
        total = sum(p.folds for p in parts)
        fit, predict = sum(p.fit_secs * p.folds for p in parts), sum(p.predict_secs * p.folds for p in parts)
        fit_records, predict_records = sum(p.fit_records for p in parts), sum(p.predict_records for p in parts)
        return cls(name=name, per_task={k: v for p in parts for k, v in p.per_task.items()},
                   fit_secs=fit / max(1, total), predict_secs=predict / max(1, total),
                   fit_secs_per_record=fit / max(1, fit_records),
                   predict_secs_per_record=predict / max(1, predict_records),
                   error=next((p.error for p in parts if p.error), ""), folds=total,
                   fit_records=fit_records, predict_records=predict_records)

    def mean(self, metric: str) -> float:
        values = [m[metric] for m in self.per_task.values() if not math.isnan(m[metric])]
        return float(np.mean(values)) if values else math.nan

    def stderr(self, metric: str) -> float:
        values = [m[metric] for m in self.per_task.values() if not math.isnan(m[metric])]
        return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else math.nan


METRICS = (("pairwise", "pairwise acc."), ("spearman", "Spearman"), ("top1", "top-1"), ("top5", "top-5"),
           ("rmse", "RMSE"))


@dataclass
class EvaluationReport:
    """What :func:`compare_models` found; ``.table`` (rich) for the terminal, ``.markdown`` for README."""

    results: list[ModelResult]
    logs: list[str]
    n_records: int
    task_names: list[str]
    extract_secs_per_record: float  # trace replay (+ TVM's PerStoreFeature when ``tvm_features``)
    held_out: int = 0  # tasks evaluated as held out (the others only train)
    loop_secs_per_record: float = 0.0
    asm_secs_per_record: float = 0.0  # LLVM build + assembly parse, when a model reads ``asm``
    tvm_features: bool = True  # did any model need PerStoreFeature
    cached_records: int = 0  # records whose features came from the feature store (not replayed)
    y_true: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    groups: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    png: str | None = None
    split: str = "task"  # one of SPLITS
    held_out_models: list[str] = field(default_factory=list)  # split "model": the models held out in turn

    def result(self, name: str) -> ModelResult:
        return next(r for r in self.results if r.name == name)

    def _rows(self) -> list[list[str]]:
        rows = []
        for r in self.results:
            if r.error:
                rows.append([r.name, f"failed: {r.error[:40]}"] + [""] * (len(METRICS) + 1))
                continue
            cells = [r.name]
            for metric, _ in METRICS:
                value, se = r.mean(metric), r.stderr(metric)
                if math.isnan(value):
                    cells.append("-")
                elif metric == "pairwise" and not math.isnan(se):
                    cells.append(f"{value:.3f} ± {se:.3f}")
                else:
                    cells.append(f"{value:.3f}")
            cells += [f"{r.fit_secs:.2f}", f"{1e3 * r.fit_secs_per_record:.2f}",
                      f"{1e6 * r.predict_secs_per_record:.1f}"]
            rows.append(cells)
        return rows

    def _header(self) -> list[str]:
        return ["model"] + [label for _, label in METRICS] + ["fit s", "fit ms/record", "predict µs/record"]

    def caption(self) -> str:
        tasks = (f"{len(self.task_names)} tasks" if self.held_out in (0, len(self.task_names))
                 else f"{self.held_out} of {len(self.task_names)} tasks (the rest train only)")
        if self.split == "model":
            tasks = f"{len(self.held_out_models)} models ({', '.join(self.held_out_models)}; {tasks})"
        costs = []  # of the records featurised here, not of those read from the feature cache
        if self.extract_secs_per_record:
            costs.append(f"feature extraction {1000 * self.extract_secs_per_record:.1f} ms per record "
                         f"({'replay + TVM' if self.tvm_features else 'trace replay'})")
        if self.loop_secs_per_record:
            costs.append(f"loop features {1000 * self.loop_secs_per_record:.1f} ms")
        if self.asm_secs_per_record:
            costs.append(f"assembly features (build + parse) {1000 * self.asm_secs_per_record:.0f} ms")
        if self.cached_records:
            costs.append(f"features of {self.cached_records} records from the feature cache")
        cost = f"; {', '.join(costs)}" if costs else ""
        return f"leave-one-{self.split}-out over {tasks}, {self.n_records} records{cost}"

    @property
    def table(self):
        """A ``rich.table.Table`` (means over held-out tasks; ± is the standard error over tasks)."""
        from rich.table import Table

        table = Table(title="cost models", caption=self.caption())
        for i, name in enumerate(self._header()):
            table.add_column(name, justify="left" if i == 0 else "right")
        for row in self._rows():
            table.add_row(*row)
        return table

    @property
    def markdown(self) -> str:
        """The same table as Markdown, with the caption below it (for README and ``--markdown``)."""
        from autosearch.tables import markdown_table

        header = self._header()
        table = markdown_table(header, self._rows(), align="-" + "r" * (len(header) - 1))  # names left, figures right
        return table + f"\n\n{self.caption()}\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "logs": self.logs, "split": self.split, "held_out_models": self.held_out_models,
            "n_records": self.n_records, "tasks": self.task_names, "held_out": self.held_out,
            "extract_secs_per_record": self.extract_secs_per_record,
            "loop_secs_per_record": self.loop_secs_per_record, "asm_secs_per_record": self.asm_secs_per_record,
            "cached_records": self.cached_records, "png": self.png,
            "models": [
                {"name": r.name, "error": r.error, "fit_secs": r.fit_secs, "predict_secs": r.predict_secs,
                 "fit_secs_per_record": r.fit_secs_per_record, "predict_secs_per_record": r.predict_secs_per_record,
                 "mean": {m: r.mean(m) for m, _ in METRICS}, "per_task": r.per_task}
                for r in self.results
            ],
        }


# ---------------------------------------------------------------------------------------------- evaluation
def held_out_tasks(dataset, min_records: int = 1) -> list[int]:
    """Indices of the tasks evaluated as held out: those with at least ``min_records`` valid records.

    A task with a handful of records says little about ranking (3 records = 3 pairs); it still trains
    every fold's model.
    """
    counts = np.bincount(dataset.groups, minlength=len(dataset.task_keys))
    return [g for g in range(len(dataset.task_keys)) if counts[g] >= min_records]


@dataclass(frozen=True)
class Fold:
    """One fit and prediction: train on the ``train`` task indices, evaluate each task of ``test``."""

    name: str  # the held-out task's name, or the held-out model's
    test: tuple[int, ...]
    train: tuple[int, ...]


def task_label(dataset, g: int) -> str:
    """Task ``g``'s name in results; with its workload key when another task of the dataset has the same name
    (two networks can name different convolutions alike), so no task's metrics overwrite another's."""
    key = dataset.task_keys[g]
    name = dataset.task_names[key]
    same = sum(dataset.task_names[k] == name for k in dataset.task_keys)
    return name if same == 1 else f"{name} ({key})"


def task_folds(dataset, held_out: Sequence[int] | None = None) -> list[Fold]:
    """Leave one task out: one fold per task of ``held_out`` (default: every task), trained on all the others."""
    everything = range(len(dataset.task_keys))
    held_out = list(everything) if held_out is None else list(held_out)
    return [Fold(task_label(dataset, g), (g,), tuple(t for t in everything if t != g)) for g in held_out]


def dataset_models(dataset) -> list[str]:
    """The models (networks) the dataset's tasks are layers of, in order of first appearance."""
    return list(dict.fromkeys(m for key in dataset.task_keys for m in dataset.task_models.get(key, ())))


def model_folds(dataset, held_out: Sequence[int] | None = None) -> list[Fold]:
    """Leave one model out: per model, its tasks (those of ``held_out``, default all) are evaluated by a model
    trained on the tasks that are no layer of it (tasks of no known model train in every fold)."""
    everything = range(len(dataset.task_keys))
    held_out = set(everything if held_out is None else held_out)
    folds = []
    for name in dataset_models(dataset):
        mine = [g for g in everything if name in dataset.task_models.get(dataset.task_keys[g], ())]
        test = tuple(g for g in mine if g in held_out)
        if test:
            folds.append(Fold(name, test, tuple(g for g in everything if g not in mine)))
    return folds


def cross_validate(dataset, spec: str, folds: Sequence[Fold], *, seed: int = 0,
                   on_fold: Callable[[str, int, int], None] | None = None) -> ModelResult:
    """Fit ``spec`` once per fold on its training tasks and score each of its held-out tasks.

    ``per_task`` is keyed by task name, or ``"fold name: task name"`` when a fold holds out several tasks
    (a model); ``y_pred`` holds each record's prediction from the (first) fold that held it out.
    ``on_fold(spec, done, total)`` is called after each fold (progress for long comparisons).
    """
    from autosearch.search.cost_model import make_cost_model

    result = ModelResult(name=spec, y_pred=np.full(len(dataset), np.nan))
    X = dataset.X(make_cost_model(spec, seed=seed).input_kind)
    y = dataset.y
    fit_secs, predict_secs, fit_records, predict_records = [], [], 0, 0
    for done, fold in enumerate(folds, start=1):
        test = np.flatnonzero(np.isin(dataset.groups, fold.test))
        train = np.flatnonzero(np.isin(dataset.groups, fold.train))
        model = make_cost_model(spec, seed=seed)
        start = time.perf_counter()
        model.fit(X[train], y[train], dataset.groups[train])
        fit_secs.append(time.perf_counter() - start)
        start = time.perf_counter()
        pred = np.asarray(model.predict(X[test]), dtype=np.float64)
        predict_secs.append(time.perf_counter() - start)
        fit_records += len(train)
        predict_records += len(test)
        fresh = np.isnan(result.y_pred[test])
        result.y_pred[test[fresh]] = pred[fresh]
        for g in fold.test:
            rows = dataset.groups[test] == g
            name = task_label(dataset, g)
            key = name if fold.test == (g,) else f"{fold.name}: {name}"
            result.per_task[key] = task_metrics(y[test][rows], pred[rows], ranker=getattr(model, "is_ranker", False))
        if on_fold is not None:
            on_fold(spec, done, len(folds))
    result.fit_secs = float(np.mean(fit_secs))
    result.predict_secs = float(np.mean(predict_secs))
    result.fit_secs_per_record = float(np.sum(fit_secs)) / max(1, fit_records)
    result.predict_secs_per_record = float(np.sum(predict_secs)) / max(1, predict_records)
    result.folds, result.fit_records, result.predict_records = len(folds), fit_records, predict_records
    return result


def leave_one_task_out(dataset, spec: str, *, seed: int = 0, folds: Sequence[int] | None = None,
                       on_fold: Callable[[str, int, int], None] | None = None) -> ModelResult:
    """Fit on all tasks but one, predict the held-out one, for every task of ``dataset`` (or of ``folds``)."""
    return cross_validate(dataset, spec, task_folds(dataset, folds), seed=seed, on_fold=on_fold)


def leave_one_model_out(dataset, spec: str, *, seed: int = 0, folds: Sequence[int] | None = None,
                        on_fold: Callable[[str, int, int], None] | None = None) -> ModelResult:
    """Per model: fit on the tasks of the other models, predict each of its tasks (of ``folds``, default all)."""
    return cross_validate(dataset, spec, model_folds(dataset, folds), seed=seed, on_fold=on_fold)


def _too_few_models(found: Sequence[str]) -> UserError:
    return UserError(f"leave-one-model-out needs tasks of at least 2 models named in the logs' task headers "
                     f"(experiments/make_dataset.py writes them); found {list(found) or 'none'}")


def comparison_dataset(logs: Sequence[str], models: Sequence[str], *, seed: int = 0, split: str = "task",
                       on_featurise: Callable[[int, int], None] | None = None,
                       feature_store: FeatureStore | str | os.PathLike | None = None):
    """The featurised dataset a comparison of ``models`` runs on: the valid trials of ``logs`` with the
    features of every model's input kind. ``split="model"`` checks the log headers name 2 networks before
    minutes of featurising."""
    from autosearch.cost_models.feature_store import as_store
    from autosearch.cost_models.features import build_dataset, read_logs
    from autosearch.search.cost_model import make_cost_model

    if isinstance(logs, str):
        logs = [logs]
    if split not in SPLITS:
        raise UserError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    models = [m for m in models if m]
    if not models:
        raise UserError("no cost models to compare")
    kinds = {make_cost_model(spec, seed=seed).input_kind for spec in models}  # fails fast on an unknown name
    contents = read_logs(list(logs))
    named = {m for c in contents for header in c.tasks.values() for m in header.get("models") or ()}
    if split == "model" and len(named) < 2:
        raise _too_few_models(sorted(named))
    dataset = build_dataset(contents, kinds=kinds, on_progress=on_featurise, store=as_store(feature_store))
    if len(dataset.task_keys) < 2:
        raise UserError(f"leave-one-task-out needs records of at least 2 tasks; the logs have "
                        f"{len(dataset.task_keys)} ({len(dataset)} valid trials with traces)")
    return dataset


def comparison_folds(dataset, split: str = "task", min_records: int = 1) -> list[Fold]:
    """The folds of a split: one per held-out task, or one per network (``split="model"``)."""
    held_out = held_out_tasks(dataset, min_records)
    if not held_out:
        raise UserError(f"no task has {min_records} or more valid records to hold out; lower --min-records")
    if split == "model":
        if len(found := dataset_models(dataset)) < 2:  # a named model's records can all be invalid
            raise _too_few_models(found)
        return model_folds(dataset, held_out)
    return task_folds(dataset, held_out)


def evaluate_model(dataset, spec: str, folds: Sequence[Fold], *, seed: int = 0,
                   on_fold: Callable[[str, int, int], None] | None = None) -> ModelResult:
    """:func:`cross_validate`, with a model that fails (a regressor that wants 1-D input) reported as its
    result's ``error`` instead of raised: one broken model is one row of a comparison."""
    try:
        return cross_validate(dataset, spec, folds, seed=seed, on_fold=on_fold)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - see above
        log.warning("cost model %s failed: %s", spec, exc)
        first_line = str(exc).splitlines()[0][:80] if str(exc) else ""
        return ModelResult(name=spec, error=f"{type(exc).__name__}: {first_line}")


def comparison_report(dataset, folds: Sequence[Fold], results: list[ModelResult], *, logs: Sequence[str],
                      split: str = "task") -> EvaluationReport:
    return EvaluationReport(
        results=results, logs=list(logs), n_records=len(dataset),
        task_names=[dataset.task_names[k] for k in dataset.task_keys],
        held_out=len({g for fold in folds for g in fold.test}),
        extract_secs_per_record=dataset.secs_per_record, loop_secs_per_record=dataset.loop_secs_per_record,
        asm_secs_per_record=dataset.asm_secs_per_record,
        tvm_features=bool(dataset.per_store), cached_records=dataset.cached,
        y_true=dataset.y, groups=dataset.groups, split=split,
        held_out_models=[fold.name for fold in folds] if split == "model" else [],
    )


def compare_models(
    logs: Sequence[str],
    models: Sequence[str] = DEFAULT_MODELS,
    *,
    seed: int = 0,
    out_png: str | None = None,
    min_records: int = 1,
    on_fold: Callable[[str, int, int], None] | None = None,
    on_featurise: Callable[[int, int], None] | None = None,
    feature_store: FeatureStore | str | os.PathLike | None = None,
    split: str = "task",
) -> EvaluationReport:
    """Leave-one-task-out (``split="task"``) or leave-one-model-out (``split="model"``) comparison of cost
    models on the valid trials of tuning logs.

    ``logs`` are tuning-log paths or TVM JSONDatabase directories
    (:func:`autosearch.frontend.database_files.read_records`);
    ``models`` are registry names, optionally with a feature set (``xgb@pooled``). A model that
    fails is reported in its row, the others still run. Writes the predicted-vs-measured PNG to
    ``out_png`` when given. Only tasks with at least ``min_records`` valid records are held out (all
    train); ``on_fold(model, done, total)`` reports progress, ``on_featurise(records_done, records_total)``
    that of featurising the records (minutes with the assembly features). Features are read from and added
    to ``feature_store`` (a ``FeatureStore``, a cache directory, or None for the default one), so comparing
    other models on the same logs featurises nothing again.
    """
    if isinstance(logs, str):
        logs = [logs]
    models = [m for m in models if m]
    dataset = comparison_dataset(logs, models, seed=seed, split=split, on_featurise=on_featurise,
                                 feature_store=feature_store)
    folds = comparison_folds(dataset, split, min_records)
    results = [evaluate_model(dataset, spec, folds, seed=seed, on_fold=on_fold) for spec in models]
    report = comparison_report(dataset, folds, results, logs=logs, split=split)
    if out_png:
        plot_predictions(report, out_png)
        report.png = out_png
    return report


def plot_predictions(report: EvaluationReport, path: str) -> None:
    """Predicted (held out) vs measured normalised throughput, one panel per model, colour = task."""
    from matplotlib import colormaps

    from autosearch.plots import figure, save

    ok = [r for r in report.results if not r.error and r.y_pred is not None]
    cols = min(3, max(1, len(ok)))
    rows = max(1, math.ceil(len(ok) / cols))
    fig, axes = figure(rows, cols, size=(4.2 * cols, 3.8 * rows))
    cmap = colormaps["tab10"]
    for ax in axes.flat[len(ok):]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, ok):
        for g, name in enumerate(report.task_names):
            sel = (report.groups == g) & np.isfinite(r.y_pred)  # tasks that only trained have no predictions
            if not sel.any():
                continue
            ax.scatter(report.y_true[sel], r.y_pred[sel], s=10, alpha=0.7, color=cmap(g % 10),
                       label=name[:28] if ax is axes.flat[0] else None)
        ax.set_title(f"{r.name}: pairwise {r.mean('pairwise'):.2f}, top-1 {r.mean('top1'):.2f}", fontsize=10)
        ax.set_xlabel("measured normalised throughput")
        ax.set_ylabel("predicted score (held-out task)")
    if ok and report.held_out <= 12:  # beyond that colours repeat and the legend outgrows the plot
        fig.legend(loc="lower center", ncol=min(4, len(report.task_names)), fontsize=7, frameon=False)
    fig.suptitle(report.caption(), fontsize=9)
    save(fig, path, rect=(0, 0.06, 1, 0.96))

