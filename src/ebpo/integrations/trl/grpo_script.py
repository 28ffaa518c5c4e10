"""Moved to :mod:`ebpo.commands.grpo.grpo_script`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.trl.grpo_script moved to ebpo.commands.grpo.grpo_script")
