"""The strategy study behind ``experiments/study.py``: which search strategy and which cost model reach a fast kernel
with the fewest measurements, on many YOLO conv tasks, against MetaSchedule with and without Droplet.

- :mod:`.config`: the TOML file (methods x tasks x seeds x budgets) as typed records.
- :mod:`.store`: the results directory: one file per finished run and per re-timing round, claims, shards.
- :mod:`.runs`: one tuning run (an autosearch method or a MetaSchedule peer) and what it found at each budget.
- :mod:`.retiming`: the best config at each budget re-timed in fresh processes, interleaved across methods.
- :mod:`.report`: medians and intervals, win rates, trials- and wall-time-to-target, tables, plots, README block.
"""
