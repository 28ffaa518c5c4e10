"""Moved to :mod:`ebpo.commands.grpo.launcher`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.trl.launcher moved to ebpo.commands.grpo.launcher")
