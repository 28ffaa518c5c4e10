"""The lab's built-in task, shared by ``ebpo train``, ``ebpo bench`` and ``ebpo verl smoke``:
arithmetic problems with exact answers, split into disjoint train / validation / held-out sets and
streamed in a fixed order per seed (:mod:`~ebpo.lab.cpu_task.task`), and the policy that learns
them on a CPU — a tiny Llama-shaped model or a pretrained one, with a supervised warm start cached
on disk so that every paired run starts from the same weights (:mod:`~ebpo.lab.cpu_task.policy`).
"""
