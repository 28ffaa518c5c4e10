"""ebpo.rewards.stats: the counters of reward_stats()."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ebpo.rewards import STATUSES, reset_reward_stats, reward_stats, score_math
from ebpo.rewards.stats import count


def test_stats_count_calls():
    reset_reward_stats()
    score_math("Answer: 1", "1")
    score_math("nothing", "1")
    stats = reward_stats()
    assert stats["calls"] == 2 and stats["correct"] == 1 and stats["no_answer"] == 1
    assert threading.current_thread() is threading.main_thread()


def test_every_counter_is_reported_and_reset():
    reset_reward_stats()
    assert reward_stats() == dict.fromkeys(("calls", "correct", *STATUSES, "worker_restarts"), 0)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: count("calls", "exact"), range(400)))
    assert reward_stats()["calls"] == reward_stats()["exact"] == 400
    reset_reward_stats()
    assert set(reward_stats().values()) == {0}
