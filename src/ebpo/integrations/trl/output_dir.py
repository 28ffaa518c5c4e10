"""Moved to :mod:`ebpo.commands.grpo.output_dir`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.trl.output_dir moved to ebpo.commands.grpo.output_dir")
