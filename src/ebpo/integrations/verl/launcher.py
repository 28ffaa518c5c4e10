"""Moved to :mod:`ebpo.commands.verl.launcher`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.verl.launcher moved to ebpo.commands.verl.launcher")
