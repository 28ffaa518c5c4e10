"""Moved to :mod:`ebpo.commands.grpo.recipe_file`: the command line left the integration.

This stub names the new path for one release, then goes.
"""

raise ImportError("ebpo.integrations.trl.recipe_file moved to ebpo.commands.grpo.recipe_file")
