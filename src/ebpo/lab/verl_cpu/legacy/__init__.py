"""verl's deprecated ``RayPPOTrainer.fit()`` on a CPU (``ebpo verl smoke --trainer legacy``):
``CPURayPPOTrainer`` overriding ``init_workers`` (the recipes' pattern), run in a ``TaskRunner``
Ray actor. Imports nothing."""
