"""A cost model trained beforehand on measured records: shipped with autosearch, or trained by a user.

Why: a cost model trained from zero in every run (MetaSchedule's XGBoost does this) guesses for the first
hundreds of trials, which is most of a short tune. Pre-trained on other tasks' measurements, it ranks a new
task's configs from its first batch (TenSet, TLP). Here it is XGBoost ranking on the loop features, which
transfer across tasks and cost a few milliseconds per config. ``train-model --family blend`` adds the
``mlp-rank`` network beside the booster (the ``blend`` model: each member's scores scaled to unit spread on the
training records, then added), which ranked held-out tasks better than either member alone.

Online, the model never forgets what it was pre-trained on: each refit grows a few trees on the run's own
measurements of the task *on top of* the pre-trained booster (XGBoost's continued training, ``xgb_model=``),
starting again from the pre-trained booster every time, so the task's own data corrects the prior without
replacing it. A blend's network stays as pre-trained: the trees carry what the task's own records say. Fine-tuning
a copy of the network on them too ranked no better in a simulation of a run's first 16 and 48 records, and worse at
16, while costing a training loop per batch (``experiments/online_refit.py``).

A model directory (``train-model --out DIR`` writes one, ``--cost-model DIR`` reads one; the shipped one is
``cost_models/pretrained_model/``) holds:

- ``model.ubj``: the booster in XGBoost's own UBJSON format (no pickle);
- ``network.npz`` (family ``blend`` only): the ``mlp-rank`` network, as ``RankingMLP.save`` writes it (no pickle);
- ``manifest.json``: what the model expects and where it came from: its family (and a blend's member spreads),
  objective and input features with their version, the target facts the features were computed for, the logs it
  was trained on (file name, SHA-256, records, tasks), its held-out accuracy, and the library versions.

A directory whose features or version differ from this autosearch's, or that was trained for another kind of
CPU, is refused with one line: its scores would be noise.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosearch.cost_models import PRETRAINED_FAMILIES
from autosearch.errors import UserError, install_hint
from autosearch.tensor_units.cpu import family_of_mcpu, target_mcpu

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
BOOSTER = "model.ubj"
NETWORK = "network.npz"
FORMAT = 1
SHIPPED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained_model")
FEATURES = "loop"  # cheap (no build) and transferable across tasks; see autosearch.cost_models.features
ONLINE_ROUNDS = 30  # trees grown on a task's own measurements at each refit, on top of the pre-trained ones


# ---------------------------------------------------------------------------------------------- target facts
def target_facts(target) -> dict[str, Any]:
    """What the loop features assume of the target (``loop_features.Machine``) and its ISA: a model trained
    on one kind of CPU ranks another's configs by the wrong machine."""
    from autosearch.cost_models.loop_features import Machine

    machine = Machine.from_target(target)
    cfg = dict(target.export())
    triple = str(cfg.get("mtriple", "") or "")
    if not triple and str(target.kind.name) == "llvm":
        import tvm

        triple = str(tvm.target.codegen.llvm_get_system_triple())
    return {"kind": str(target.kind.name), "arch": triple.split("-")[0], "vector_bits": machine.vector_bits,
            "vector_registers": machine.vector_registers, "mcpu": str(cfg.get("mcpu", "") or "")}


def fits(facts: dict[str, Any], trained: dict[str, Any]) -> str:
    """Why a model trained for ``trained`` does not fit a target with ``facts`` ('' when it fits): another
    target kind or ISA. The CPU model and its vector width may differ: the loop features are computed with the
    target's own machine facts, so what the model learnt (how schedules use a CPU's vector unit, registers and
    caches) carries over, if less well than to the CPU it was measured on."""
    for key in ("kind", "arch"):
        if facts.get(key) != trained.get(key):
            return f"trained for {key} {trained.get(key)!r}, the target has {facts.get(key)!r}"
    return ""


def feature_version() -> int:
    from autosearch.cost_models import loop_features

    return int(loop_features.VERSION)


# ---------------------------------------------------------------------------------------------- the model
@dataclass
class PretrainedModel:
    """A pre-trained booster (and, for a blend, network) plus what the run's own measurements add (``fit``:
    continued training of the booster).

    Follows the CostModel protocol; ``pretrained`` tells a scorer that it ranks before any fit.
    """

    booster: Any  # xgboost.Booster, as loaded
    manifest: dict[str, Any]
    directory: str
    network: Any = None  # autosearch.cost_models.mlp_rank.RankingMLP of a blend, as loaded
    seed: int = 0
    note: str = ""  # why part of the model is not in use (a blend's network without PyTorch)
    online_rounds: int = ONLINE_ROUNDS
    pretrained: bool = True
    input_kind: str = FEATURES

    def __post_init__(self) -> None:
        self.refit_ = None  # the booster after the last fit (pre-trained trees + the task's own)

    @property
    def spreads(self) -> tuple[float, float]:
        """A blend's members' score spreads on the training records (what each member's scores are divided by)."""
        return tuple(self.manifest.get("spreads", (1.0, 1.0)))

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> PretrainedModel:
        """Grow ``online_rounds`` trees on these examples on top of the pre-trained booster (not on the last refit:
        each refit starts from what was shipped, plus all the task's records so far)."""
        import xgboost as xgb

        from autosearch.cost_models.xgboost_model import ranking_data

        X, relevance, qid = ranking_data(X, y, groups)
        data = xgb.DMatrix(X, label=relevance, qid=qid)
        params = dict(self.manifest["params"], seed=self.seed, nthread=1, verbosity=0)
        self.refit_ = xgb.train(params, data, num_boost_round=self.online_rounds, xgb_model=self.booster)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        booster = self.refit_ if self.refit_ is not None else self.booster
        trees = np.asarray(booster.predict(xgb.DMatrix(np.asarray(X, dtype=np.float32))), dtype=np.float64)
        if self.network is None:
            return trees
        return trees / self.spreads[0] + self.network.predict(X) / self.spreads[1]

    def save(self, path: str) -> None:
        """A model directory at ``path`` with the pre-trained model (the online trees are the run's own)."""
        write_model_dir(path, self.booster, self.manifest, self.network)


def write_model_dir(path: str, booster, manifest: dict[str, Any], network=None) -> None:
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, "tmp-" + BOOSTER)  # the extension tells XGBoost the format
    booster.save_model(tmp)
    os.replace(tmp, os.path.join(path, BOOSTER))
    if network is not None:
        network.save(os.path.join(path, NETWORK))  # written atomically by _io.write_npz
    with open(os.path.join(path, MANIFEST + ".tmp"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(os.path.join(path, MANIFEST + ".tmp"), os.path.join(path, MANIFEST))


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of a model directory, checked for what this autosearch can use; one-line errors."""
    if not os.path.isdir(path):
        raise UserError(f"cost model directory not found: {path}")
    try:
        with open(os.path.join(path, MANIFEST)) as fh:
            manifest = json.load(fh)
    except FileNotFoundError as exc:
        raise UserError(f"{path} is not a cost model directory: no {MANIFEST} (train-model writes one)") from exc
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}/{MANIFEST} is corrupt: {type(exc).__name__}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path}: cost model format {manifest.get('format') if isinstance(manifest, dict) else '?'}"
                        f" is not {FORMAT}; train it again with train-model")
    if manifest.get("family") not in PRETRAINED_FAMILIES:
        raise UserError(f"{path}: cost model family {manifest.get('family')!r} is not one of "
                        f"{', '.join(PRETRAINED_FAMILIES)}")
    if manifest.get("features") != FEATURES or manifest.get("feature_version") != feature_version():
        raise UserError(f"{path} was trained on features {manifest.get('features')!r} version "
                        f"{manifest.get('feature_version')}; this autosearch computes {FEATURES!r} version "
                        f"{feature_version()}: train it again with train-model")
    cpus = manifest.get("cpus", [])
    if not isinstance(cpus, list) or not all(
            isinstance(c, dict) and isinstance(c.get("family"), str) and isinstance(c.get("mcpu"), str)
            and isinstance(c.get("records"), int) and c["records"] >= 0 for c in cpus):
        raise UserError(f"{path}/{MANIFEST} is corrupt: cpus must list {{family, mcpu, records}} per log")
    return manifest


def load_model_dir(path: str, target=None, *, seed: int = 0, trees_without_torch: bool = False) -> PretrainedModel:
    """Load a model directory for ``target`` (checked against the manifest when given).

    A blend needs PyTorch for its network. Without it, ``trees_without_torch`` loads the blend's booster alone (an
    ``xgb-rank`` model in its own right, trained on the same records) and says so in ``note``: the shipped model
    then still guides an install without the ``[learned]`` extra. Otherwise (a directory the user named) it is a
    one-line error naming the install command."""
    import importlib.util

    import xgboost as xgb

    manifest = read_manifest(path)
    if target is not None:
        why = fits(target_facts(target), manifest.get("target", {}))
        if why:
            raise UserError(f"cost model {path} does not fit this target: {why}")
    booster = xgb.Booster()
    try:
        booster.load_model(os.path.join(path, BOOSTER))
    except (xgb.core.XGBoostError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}/{BOOSTER} cannot be loaded: {first[:160]}") from exc
    if booster.num_features() != manifest.get("feature_width"):
        raise UserError(f"{path}: the booster takes {booster.num_features()} features, the manifest says "
                        f"{manifest.get('feature_width')}")
    network, note = None, ""
    if manifest["family"] == "blend":
        if trees_without_torch and importlib.util.find_spec("torch") is None:
            note = f"its network needs PyTorch ({install_hint('torch')}), so its trees rank alone"
        else:
            network = _load_network(path, manifest)
    return PretrainedModel(booster=booster, manifest=manifest, directory=path, network=network, seed=seed,
                           note=note)


def _load_network(path: str, manifest: dict[str, Any]):
    """A blend's network; it needs PyTorch (a one-line error naming how to install it when it is missing)."""
    try:
        from autosearch.cost_models.mlp_rank import load
    except ImportError as exc:
        raise UserError(f"{path} is a blend of trees and a network: it needs the package {exc.name!r}: "
                        f"{install_hint(exc.name or 'torch')}") from exc
    network = load(os.path.join(path, NETWORK))
    width = network.encoder_.lo.shape[0] if hasattr(network, "encoder_") else None
    if width != manifest.get("feature_width"):
        raise UserError(f"{path}/{NETWORK}: the network takes {width} features, the manifest says "
                        f"{manifest.get('feature_width')}")
    return network


def shipped_for(target) -> tuple[str | None, str]:
    """(the shipped model's directory, '') if it fits ``target``, else (None, why not): ``--cost-model auto``
    then runs unguided and says why."""
    if str(target.kind.name) != "llvm":
        return None, f"the shipped model is for CPUs, the target is {target.kind.name}"
    if not os.path.exists(os.path.join(SHIPPED_DIR, MANIFEST)):
        return None, "this installation has no shipped model"
    why = fits(target_facts(target), read_manifest(SHIPPED_DIR).get("target", {}))
    return (None, f"the shipped model does not fit this target: {why}") if why else (SHIPPED_DIR, "")


def family_note(manifest: dict[str, Any], target) -> str:
    """Whether the model was trained on records of ``target``'s CPU, else of its family (for the run header): a
    model transfers across families, less well than within one (the manifest's ``held_out.by_family``), and within
    a family across vector ISAs less well than on one (a Zen 3's AVX2 and a Zen 4's AVX-512:
    ``experiments/cpu_transfer.py``)."""
    mcpu = target_mcpu(target)
    family = family_of_mcpu(mcpu)
    if mcpu and mcpu in {c.get("mcpu") for c in manifest.get("cpus", [])}:
        return f"records of this CPU ({family} {mcpu}) among them"
    trained = [c.get("family") for c in manifest.get("cpus", [])] or [family_of_mcpu(
        str(manifest.get("target", {}).get("mcpu", "")))]
    if family in trained:
        return f"records of this CPU family ({family}) among them"
    return f"no records of this CPU family ({family}): trained on {', '.join(sorted(set(trained)))}"


def describe(manifest: dict[str, Any], note: str = "") -> str:
    """One line for a run's header: what the model is, how well it ranked held-out tasks, and ``note``."""
    held = manifest.get("held_out", {})
    cpus = ", ".join(dict.fromkeys(f"{c['family']} {c['mcpu']}" for c in manifest.get("cpus", [])))
    units = ", ".join(manifest.get("tensor_units", []))
    return (f"{manifest.get('family')} on {manifest.get('features')} features, pre-trained on "
            f"{manifest.get('records')} records of {manifest.get('tasks')} tasks{f' ({cpus})' if cpus else ''}"
            f"{f', bf16 on {units} among them' if units else ''} (held-out pairwise "
            f"{held.get('pairwise', float('nan')):.2f}, top-1 {held.get('top1', float('nan')):.2f})"
            + (f"; {note}" if note else ""))


def create(name: str, *, seed: int = 0) -> PretrainedModel:
    """Registry factory: ``pretrained`` (the shipped model; a blend's trees alone without PyTorch) or a directory
    that ``train-model`` wrote."""
    shipped = name == "pretrained"
    return load_model_dir(SHIPPED_DIR if shipped else name, seed=seed, trees_without_torch=shipped)


# ---------------------------------------------------------------------------------------------- training
def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class TrainReport:
    manifest: dict[str, Any]
    folds: list[dict[str, float]]  # per held-out fold: pairwise accuracy, top-1, tasks
    secs: float


@dataclass
class RankingSet:
    """The valid records of several logs as one ranker's data: the loop features ``X``, labels ``y`` (throughput
    normalised per task) and one group per (log, task), since labels compare configs measured on one machine only
    and a task measured on two CPUs is two groups. ``task_of_group`` indexes ``keys`` (workload keys) so that a
    task's groups on every machine can share a fold; ``log_of_group`` indexes the logs."""

    X: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    keys: list[str]
    task_of_group: np.ndarray
    log_of_group: np.ndarray
    parts: list  # one FeatureDataset per log

    def task_folds(self, folds: int, *, seed: int) -> np.ndarray:
        """The fold of each task (indexed as ``keys``): tasks dealt round-robin in a seeded random order into
        ``folds`` folds (at least 2, at most one per task), so a task's groups on every machine share one."""
        tasks = np.random.default_rng(seed).permutation(len(self.keys))
        fold_of_task = np.empty(len(tasks), dtype=np.int64)
        fold_of_task[tasks] = np.arange(len(tasks)) % max(2, min(folds, len(tasks)))
        return fold_of_task


def ranking_set(contents, *, on_progress=None) -> RankingSet:
    """Featurise the logs' ``contents`` (read by ``features.read_logs``) through the feature cache, as
    compare-models and warm starts do: training again (another family, seed or exclusion) featurises nothing
    twice. ``on_progress(done, total)`` counts records over all logs."""
    from autosearch.cost_models.feature_store import as_store
    from autosearch.cost_models.features import build_dataset, labelled_trials

    totals = [len(labelled_trials(c)) for c in contents]

    def progress(base: int):
        return None if on_progress is None else (lambda done, _total: on_progress(base + done, sum(totals)))

    parts = [build_dataset([c], kinds=(FEATURES,), store=as_store(None), on_progress=progress(sum(totals[:i])))
             for i, c in enumerate(contents)]
    keys = list(dict.fromkeys(k for part in parts for k in part.task_keys))
    offsets = np.cumsum([0] + [len(part.task_keys) for part in parts])
    filled = [i for i, part in enumerate(parts) if len(part)]
    index = {k: i for i, k in enumerate(keys)}
    return RankingSet(
        X=np.vstack([parts[i].X(FEATURES) for i in filled]) if filled else np.zeros((0, 0)),
        y=np.concatenate([parts[i].y for i in filled]) if filled else np.zeros(0),
        groups=(np.concatenate([parts[i].groups + offsets[i] for i in filled]) if filled
                else np.zeros(0, dtype=np.int64)),
        keys=keys,
        task_of_group=np.asarray([index[k] for part in parts for k in part.task_keys], dtype=np.int64),
        log_of_group=np.asarray([i for i, part in enumerate(parts) for _ in part.task_keys], dtype=np.int64),
        parts=parts)


def train_model(logs: list[str], out_dir: str, *, family: str = "xgb-rank", seed: int = 0, folds: int = 5,
                exclude: tuple[str, ...] = (), on_progress=None) -> TrainReport:
    """Train ``family`` (the XGBoost ranker, or the blend of it and the ``mlp-rank`` network) on the loop features
    of every valid record of ``logs`` (but the tasks whose workload keys are in ``exclude``: kept out to test the
    model on) and write a model directory to ``out_dir``. Held-out accuracy: ``folds`` folds by task (each task's
    records all in one fold), each fold predicted by a model trained on the others; then the model is trained on
    everything."""
    from autosearch import __version__
    from autosearch.cost_models.evaluate import pairwise_accuracy, top_k_score
    from autosearch.cost_models.features import read_logs
    from autosearch.frontend.target import parse_target
    from autosearch.search.cost_model import make_cost_model

    if family not in PRETRAINED_FAMILIES:
        raise UserError(f"unknown family {family!r} for train-model; valid: {', '.join(PRETRAINED_FAMILIES)}")
    model = make_cost_model(f"{family}@{FEATURES}", seed=seed)  # the registry's xgb-rank or blend (its members)
    if family == "blend":
        make_cost_model("mlp-rank", seed=seed)  # needs PyTorch: say so now, not after minutes of featurising
    start = time.perf_counter()
    contents = read_logs(logs)
    if exclude:
        for c in contents:
            c.records = [r for r in c.records if r.task_key not in exclude]
    data = ranking_set(contents, on_progress=on_progress)
    parts, keys, records = data.parts, data.keys, len(data.y)
    if records < 2 or len(keys) < 2:
        raise UserError(f"train-model needs valid records of at least 2 tasks; the logs hold {records} "
                        f"record(s) of {len(keys)} task(s)")
    X, y, groups, task_of_group, log_of_group = data.X, data.y, data.groups, data.task_of_group, data.log_of_group
    machines = [cpu_family(c) for c in contents]
    machine_of_group = np.asarray(machines)[log_of_group]
    fold_of_task = data.task_folds(folds, seed=seed)
    task_fold = fold_of_task[task_of_group[groups]]
    # the bf16 unit of each group whose schedules are tensorised (the tensor features' unit), else ""
    from autosearch.cost_models.loop_features import FEATURE_NAMES

    unit_col = FEATURE_NAMES.index("tensor_unit")
    tensorised = np.zeros(len(log_of_group), dtype=bool)
    tensorised[np.unique(groups[X[:, unit_col] > 0])] = True
    log_units = np.asarray([_log_bf16_unit(c) for c in contents], dtype=object)
    unit_of_group = np.where(tensorised, log_units[log_of_group], "")
    results = []
    held_out = np.zeros(len(y))
    for fold in np.unique(fold_of_task).tolist():
        test = task_fold == fold
        model.fit(X[~test], y[~test], groups[~test])
        pred = held_out[test] = model.predict(X[test])
        top1 = [top_k_score(y[test][groups[test] == g], pred[groups[test] == g], 1) for g in np.unique(groups[test])]
        results.append({"pairwise": pairwise_accuracy(y[test], pred, groups[test]), "top1": float(np.mean(top1)),
                        "tasks": int(len(np.unique(groups[test])))})
    by_unit = {}
    for unit in sorted(set(unit_of_group) - {""}):
        rows = unit_of_group[groups] == unit
        ids = np.unique(groups[rows])
        by_unit[unit] = {"pairwise": float(pairwise_accuracy(y[rows], held_out[rows], groups[rows])),
                         "top1": float(np.mean([top_k_score(y[groups == g], held_out[groups == g], 1) for g in ids])),
                         "tasks": int(len(ids))}
    # families compared on fp32 tasks: only one family's records may hold a unit (AMX), and a model of the other
    # family's fp32 schedules cannot rank those
    fp32 = unit_of_group[groups] == ""
    by_family = (cross_family_accuracy(model, X[fp32], y[fp32], groups[fp32], task_of_group, machine_of_group,
                                       task_fold[fp32])
                 if len(set(machine_of_group[unit_of_group == ""])) > 1 else {})
    model.fit(X, y, groups)
    trees, network = (model.members_[0], model.members_[1]) if family == "blend" else (model, None)
    booster = trees.estimator_.get_booster()
    # the target the records were measured on, from the logs' task headers
    header = next((h for c in contents for h in c.tasks.values() if h.get("target")), None)
    facts = target_facts(parse_target(json.dumps(header["target"]))) if header else {}
    weights = np.asarray([r["tasks"] for r in results], dtype=np.float64)
    manifest = {
        "format": FORMAT,
        "family": family,
        **({"spreads": [float(v) for v in model.spreads_]} if family == "blend" else {}),
        "params": {k: v for k, v in trees.estimator_.get_xgb_params().items()
                   if v is not None and k not in ("n_jobs", "nthread", "random_state", "seed", "verbosity")},
        "features": FEATURES,
        "feature_version": feature_version(),
        "feature_width": int(X.shape[1]),
        "target": facts,
        "trained_on": [{"log": _log_name(p), "sha256": _sha256(p), "records": int(
            sum(1 for r in c.trials() if r.ok)), "tasks": len({r.task_key for r in c.trials()})}
            for p, c in zip(logs, contents)],
        "records": records,
        "tasks": len(keys),
        "task_keys": keys,  # what it has seen: evaluate it on other tasks
        # the CPUs the records were measured on, one entry per log
        "cpus": [{"family": m, "mcpu": log_cpu(c), "records": len(part), "tasks": len(part.task_keys)}
                 for m, c, part in zip(machines, contents, parts)],
        # the bf16 units whose tensorised schedules the records hold: the tasks lowered to them are guided
        "tensor_units": sorted(by_unit),
        "excluded": sorted(exclude),
        "held_out": {"folds": len(results), "by": "task",
                     "pairwise": float(np.average([r["pairwise"] for r in results], weights=weights)),
                     "top1": float(np.average([r["top1"] for r in results], weights=weights)),
                     **({"by_family": by_family, "by_family_tasks": "fp32"} if by_family else {}),
                     **({"by_unit": by_unit} if by_unit else {})},
        "versions": {"autosearch": __version__, "xgboost": _version("xgboost"), "tvm": _version("tvm"),
                     **({"torch": _version("torch")} if family == "blend" else {})},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_model_dir(out_dir, booster, manifest, network)
    return TrainReport(manifest=manifest, folds=results, secs=time.perf_counter() - start)


def _log_name(path: str) -> str:
    """How the manifest names a log: its path from the working directory where it lies below it (the tuning logs of
    runs are all called ``log.jsonl.gz``; their directories say which run), else its file name."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else os.path.basename(path)


def log_cpu(contents) -> str:
    """LLVM's name for the CPU a log's records were timed on (:attr:`~autosearch.types.Record.timed_on` of its first
    record with a target): the labels are that CPU's."""
    return next((r.timed_on for r in contents.records if r.target), "")


def _log_bf16_unit(contents) -> str:
    """The bf16 unit a log's tensorised tasks ran on (:func:`autosearch.tensor_units.cpu.bf16_unit` of its records'
    target), "" where the target has none."""
    from autosearch.frontend.target import parse_target
    from autosearch.tensor_units.cpu import bf16_unit

    target = next((r.target for r in contents.records if r.target), None)
    return (bf16_unit(parse_target(json.dumps(target))) or "") if target else ""


def covers(manifest: dict[str, Any], unit: str | None) -> bool:
    """Whether a model's records hold schedules tensorised onto ``unit`` (None: fp32 schedules, which every model
    holds): a model of fp32 schedules ranks those no better than chance (``experiments/tensor_features.py``)."""
    return unit is None or unit in manifest.get("tensor_units", [])


def cpu_family(contents) -> str:
    """The CPU family a log was measured on (:func:`family_of_mcpu` of its records' target)."""
    return family_of_mcpu(log_cpu(contents))


def cross_family_accuracy(model, X, y, groups, task_of_group, machine_of_group, task_fold) -> dict[str, dict]:
    """Held-out pairwise accuracy per tested family and training set, on the folds by task of ``task_fold``: per
    family F, a model trained on F's other tasks ("same"), on another family's ("from X"), and on every family's
    ("all"). The first run on a CPU family a model has not seen is the "from" column.

    "same, common tasks" trains on F's records of only the tasks every family measured: a family with more tasks
    of its own trains "same" on more data than the other family can offer, and "from X" against it would then
    measure the data's size as much as the family; against "same, common tasks" only the machine differs."""
    from autosearch.cost_models.evaluate import pairwise_accuracy

    fam = machine_of_group[groups]
    families = sorted(set(fam))
    task_of_row = task_of_group[groups]
    common = set.intersection(*(set(task_of_row[fam == f].tolist()) for f in families))
    in_common = np.isin(task_of_row, sorted(common))
    out: dict[str, dict] = {}
    for tested in families:
        sources = {"same": fam == tested, "same, common tasks": (fam == tested) & in_common,
                   "all": np.ones(len(y), dtype=bool),
                   **{f"from {other}": fam == other for other in families if other != tested}}
        scores: dict[str, list[tuple[float, int]]] = {name: [] for name in sources}
        for fold in np.unique(task_fold):
            test = (task_fold == fold) & (fam == tested)
            if not test.any():
                continue
            for name, train_rows in sources.items():
                train = train_rows & (task_fold != fold)
                if len(np.unique(groups[train])) < 2:
                    continue
                model.fit(X[train], y[train], groups[train])
                tasks = len(np.unique(groups[test]))
                scores[name].append((pairwise_accuracy(y[test], model.predict(X[test]), groups[test]), tasks))
        out[tested] = {name: float(np.average([a for a, _ in v], weights=[n for _, n in v]))
                       for name, v in scores.items() if v}
    return out


def _version(package: str) -> str:
    import importlib

    return str(getattr(importlib.import_module(package), "__version__", ""))


__all__ = ["FEATURES", "PretrainedModel", "SHIPPED_DIR", "TrainReport", "cpu_family", "create",
           "cross_family_accuracy", "describe", "family_note", "family_of_mcpu", "fits", "load_model_dir",
           "read_manifest", "shipped_for", "target_facts", "train_model"]
