"""The search: each task's schedule space, the strategy and cost-model protocols, and the loop over tasks.

:mod:`~autosearch.search.space` turns a task into a :class:`~autosearch.search.space.DecisionSpace`; a strategy
(:mod:`~autosearch.search.strategy`, the plug-ins in ``autosearch.strategies``) asks and is told, optionally
guided by a cost model (:mod:`~autosearch.search.cost_model`, the plug-ins in ``autosearch.cost_models``);
:mod:`~autosearch.search.scheduler` chooses which task gets the next batch and when the budget is spent;
:mod:`~autosearch.search.tuner` runs the loop, and :mod:`~autosearch.search.finalists` re-times each task's finalists
after it. Tasks come from :mod:`autosearch.frontend`; kernels are measured by a runner of
:mod:`autosearch.measure`.
"""
