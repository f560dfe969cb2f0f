"""The evaluation of a prior: where it is wrong, and what a wrong choice costs (seed 09).

`evaluate(dataset_dir, prior, pools=...)` judges a prior on a dataset export in the golden
view (where each golden ranks, strictly and with ties counted against it) and the measured
view (rank correlation and slowdowns of its picks), per card and setting, beside the
baselines on the same pools; `EvalReport.to_json()` has the shape of a fit's metrics,
`.markdown()` is the table a person reads; `compare_reports(a, b)` puts two side by side;
`write_plots` draws them; `verdict` decides whether a candidate may replace the installed
prior. Importing this package needs numpy only; reading an export needs polars and pyarrow.
"""

from emmy_core.eval.compare import compare_reports, read_report
from emmy_core.eval.report import EvalError, EvalReport, evaluate
from emmy_core.eval.verdict import Verdict, verdict

__all__ = ["EvalError", "EvalReport", "Verdict", "compare_reports", "evaluate", "read_report", "verdict"]
