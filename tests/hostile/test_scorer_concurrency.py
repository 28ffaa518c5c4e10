"""The math scorer under concurrency on a loaded machine (issue #21 item 8): scoring in threads
with ``timeout=1``, then in a ``fork`` pool, then in the main thread, each in a fresh process.

The reported failure: a fork pool after scoring in threads scored correct answers ``rejected`` in
2 of 3 runs. The cause: the parent had scored only in threads (helper processes), so each forked
child imported math-verify and sympy in-process, for the first time, under the 1 s timer; on a
loaded machine the import took longer, the timer interrupted it, and a half-imported sympy made
every later parse of that child fail ("rejected"). A loaded machine is simulated here, the same
way in every run: a ``sitecustomize`` makes the first import of ``sympy.polys`` (in the middle of
sympy's own import) take 1.5 s in every process, helpers included. The load is the same in every
run, so the check runs once (it ran three times; that repeated the same conditions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SLOW_IMPORT = textwrap.dedent(
    """
    import sys, time

    class SlowFirstImport:
        # The first import of sympy.polys in this process takes 1.5 s (a loaded machine).
        done = False

        def find_spec(self, name, path=None, target=None):
            if name == "sympy.polys" and not SlowFirstImport.done:
                SlowFirstImport.done = True
                time.sleep(1.5)
            return None

    sys.meta_path.insert(0, SlowFirstImport())
    """
)

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, time
    from concurrent.futures import ThreadPoolExecutor
    from ebpo.rewards import score_math_detailed

    # Correct answers that only math-verify can confirm (no fast path applies).
    PAIRS = [
        (f"Answer: \\\\frac{{{k}}}{{{2 * k + 1}}}", f"\\\\frac{{{2 * k}}}{{{4 * k + 2}}}")
        for k in range(1, 9)
    ] + [("Answer: 0.5", "\\\\frac{1}{2}"), ("Answer: 2^{1/2}", "\\\\sqrt{2}")]

    def one(pair):
        start = time.perf_counter()
        status = score_math_detailed(pair[0], pair[1], timeout=1).status
        return status, time.perf_counter() - start

    if __name__ == "__main__":
        with ThreadPoolExecutor(4) as threads:
            in_threads = list(threads.map(one, PAIRS))
        with multiprocessing.get_context("fork").Pool(2) as pool:
            forked = pool.map(one, PAIRS)
        main_thread = [one(pair) for pair in PAIRS]
        print(json.dumps({"threads": in_threads, "fork": forked, "main": main_thread}))
    """
)


def test_threads_then_fork_pool_score_correct_answers_as_correct(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_IMPORT)
    script = tmp_path / "score.py"
    script.write_text(SCRIPT)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "PYTHONPATH": path, "EBPO_REWARD_WORKERS": "2"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.splitlines()[-1])
    for where, outcomes in results.items():
        statuses = [status for status, _ in outcomes]
        assert statuses == ["verified"] * len(statuses), f"{where}: {outcomes}"
    # No clock: what made these calls slow (each helper imported torch as it started, 4-7 s) is
    # shown by counting the modules a helper imports (tests/rewards/test_verify.py).
