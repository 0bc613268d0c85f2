"""Max-load (pipelined throughput) solvers of Tarnawski et al.: the DP over ideals and DPL
(dp.py, preprocess.py) and the contiguous / non-contiguous integer programs in CP-SAT (ip_cpsat.py)
and as a MIP (ip_mip.py), with the model builder they and the LNS share (cpsat_model.py), the
warm starts (anneal.py, lns.py) and the baselines of Section 6 (heuristics.py: local search,
PipeDream's DP, an expert's split)."""
