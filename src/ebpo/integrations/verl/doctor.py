"""Moved to :mod:`ebpo.commands.verl.doctor`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.verl.doctor moved to ebpo.commands.verl.doctor")
