"""Deployment: a tuning log turned into a model that runs, and measured against other runtimes.

:mod:`~autosearch.deploy.database` exports the best schedules as TVM's own JSONDatabase (``export``;
:mod:`~autosearch.deploy.budget` under a memory budget), :mod:`~autosearch.deploy.build` compiles the whole model
with it (``compile``; the weights file: :mod:`~autosearch.deploy.artifact`; the memory it will hold:
:mod:`~autosearch.deploy.memory`), and :mod:`~autosearch.deploy.report` times it against untuned TVM, ONNX
Runtime and OpenVINO (``report``), each runtime in a fresh process (:mod:`~autosearch.deploy.timing`,
:mod:`~autosearch.deploy.bench`); :mod:`~autosearch.deploy.profile` says where its time goes, kernel by kernel
beside OpenVINO's nodes (``profile``). :mod:`~autosearch.deploy.transitions` times, at a run's end, the layout
transforms between layers of the model export would keep, since export weighs them. It reads the log
(:mod:`autosearch.records`) and the tasks (:mod:`autosearch.frontend`); the search never imports it.
"""
