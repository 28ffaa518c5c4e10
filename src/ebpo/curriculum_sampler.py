"""Moved: the curriculum sampler and verl dataset class live in
``ebpo.integrations.verl.curriculum_sampler``. Importing this old path fails with the new one, so a
verl config that still names ``pkg://ebpo.curriculum_sampler`` says what to write instead."""

raise ImportError(
    "ebpo.curriculum_sampler moved to ebpo.integrations.verl.curriculum_sampler: in verl configs "
    "write data.custom_cls.path=pkg://ebpo.integrations.verl.curriculum_sampler "
    "(and data.sampler.class_path likewise)"
)
