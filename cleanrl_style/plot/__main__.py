"""``python -m cleanrl_style.plot``: see :mod:`cleanrl_style.plot.cli`."""

from cleanrl_style.plot.cli import main

raise SystemExit(main())
