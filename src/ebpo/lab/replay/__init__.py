"""Moved to :mod:`ebpo.analysis.replay`: the analysis of users' runs left the CPU lab.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.lab.replay moved to ebpo.analysis.replay (the analysis of users' runs)")
