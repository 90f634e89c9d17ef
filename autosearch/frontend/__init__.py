"""The front end: an ONNX model and a TVM target in, tuning tasks out.

:mod:`~autosearch.frontend.importer` reads the model (made static by :mod:`~autosearch.frontend.static_graph`),
:mod:`~autosearch.frontend.lowering` turns it into Relax and fused TIR with its alternatives (layouts:
:mod:`~autosearch.frontend.alternatives`; Winograd: :mod:`~autosearch.frontend.winograd`), and each distinct
layer becomes a :class:`~autosearch.frontend.task.TuningTask` for :mod:`autosearch.frontend.target`'s target.
A TVM database is read the same way (:mod:`~autosearch.frontend.database_files`): its workloads as tasks, its
records as log contents.
Nothing here searches or measures: the later stages (``search``, ``measure``, ``deploy``) import this package,
never the other way round.
"""
