"""`python -m binloop`: the `binloop` command."""

from binloop.cli import main

raise SystemExit(main())
