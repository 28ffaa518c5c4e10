"""Moved to :mod:`ebpo.analysis.paired`: the bench and ``ebpo compare`` share its paired statistics.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.lab.bench.stats moved to ebpo.analysis.paired (shared with ebpo compare)")
