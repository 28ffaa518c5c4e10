"""Moved to :mod:`ebpo.commands.grpo.dry_run`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.trl.dry_run moved to ebpo.commands.grpo.dry_run")
