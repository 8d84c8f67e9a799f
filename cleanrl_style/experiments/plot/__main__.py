"""``python -m cleanrl_style.experiments.plot``: see :mod:`cleanrl_style.experiments.plot.cli`."""

from cleanrl_style.experiments.plot.cli import main

raise SystemExit(main())
