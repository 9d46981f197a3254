"""`gpuperf ab` and `gpuperf bisect`: sessions of two stacks run in pairs and judged paired (above core, below cli).

engine.py runs the loop (``run_ab``); model.py is the plan, the result and ab.json; pairs/ runs a pair's sessions
(sequential.py, taking_turns.py over turns.py, both through sessions.py); reading.py reads a finished session;
leave_out.py, judging.py and progress.py leave pairs out, judge them and word the progress; cpus.py pins.
bisection.py, builders.py and bisect_search.py are `gpuperf bisect`. Nothing here imports cli/ or a workload.
"""
