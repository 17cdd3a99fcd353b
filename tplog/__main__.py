"""``python -m tplog`` runs the ``tplog`` command line."""

from tplog.cli import main

raise SystemExit(main())
