"""What a lab run owns, shared by ``ebpo train`` (which writes runs) and ``ebpo bench`` (which reads
its cells' runs): the run directory — its ``run.json`` manifest, which directories count as ebpo's
own runs, what may be replaced or resumed, the metrics file (:mod:`~ebpo.lab.runs.directory`)
and its life-cycle as the job goes (:mod:`~ebpo.lab.runs.lifecycle`) — the OS lock that keeps
one process per run directory (:mod:`~ebpo.utils.run_lock`), and the processes of a launch:
rank, and exchanges that carry a failure to every process so that none waits in a collective
(:mod:`~ebpo.lab.runs.processes`).
"""
