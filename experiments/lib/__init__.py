"""The experiment helpers every script in ``experiments/`` uses, each written once.

- :mod:`.io`: where results go (``experiments/results/``), atomic JSON / text writes.
- Markdown tables and number formatting: :mod:`autosearch.tables` (the core writes tables too).
- :mod:`.stats`: medians, bootstrap intervals, trials-to-target, pairwise order by how far apart a pair is.
- :mod:`.tasks`: naming a conv task stably (``MODEL[:LAYOUT]:LAYER[@KxK][/ALGORITHM]``) and finding it.
- :mod:`.tuning`: one autosearch tuning run of one task, and what its records say at a budget.
- :mod:`.retime`: re-timing schedules in fresh measuring processes, interleaved across methods.
- :mod:`.loo`: leave-one-task-out splits (cost models) and warm-start logs without the task under test.
- :mod:`.metaschedule`: TVM's own tuner (``ms.tune_tir``, with or without Droplet post-optimisation) on the
  same design space and evaluator, with the time every trial finished.
- :mod:`.machine`: the fingerprint of the machine a result was measured on.
- :mod:`.plots`: figures shared by several experiments (performance profiles, best-so-far curves).
- :mod:`.study`: the strategy study (``experiments/study.py``).
"""

from autosearch.tvm_compat import lighten_tvm_import

# Each script here runs as a process of its own (studies start one per run): TVM imported as the CLI imports it.
lighten_tvm_import()
