"""``ebpo bench``, the paired comparison of estimators: a matrix of (method, G, learning rate, seed)
cells, each one ``ebpo train`` job from the same warm start on the same prompt stream, read seed by
seed against GRPO as mean paired differences with Student-t intervals. The loop is
:mod:`~ebpo.lab.bench.run`; the rows :mod:`~ebpo.lab.bench.methods`, the matrix
:mod:`~ebpo.lab.bench.config`, one cell :mod:`~ebpo.lab.bench.cells`, the conclusions
:mod:`~ebpo.lab.bench.summary` (with the paired statistics of :mod:`~ebpo.analysis.paired`) and the
results folder :mod:`~ebpo.lab.bench.report`.
"""
