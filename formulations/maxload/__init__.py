"""Max-load (pipelined throughput) solvers of Tarnawski et al.: the DP over ideals and DPL
(dp.py, preprocess.py) and the contiguous / non-contiguous integer programs in CP-SAT (ip_cpsat.py)
and as a MIP (ip_mip.py). Importing the package registers their methods."""
from . import dp, ip_cpsat, ip_mip  # noqa: F401
