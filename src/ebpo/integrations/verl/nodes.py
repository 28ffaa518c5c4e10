"""Moved to :mod:`ebpo.commands.verl.nodes`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.verl.nodes moved to ebpo.commands.verl.nodes")
