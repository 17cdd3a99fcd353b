"""``python -m tplog`` runs the ``tplog`` command line."""

from tplog._cli import main

raise SystemExit(main())
