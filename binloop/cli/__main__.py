"""`python -m binloop.cli`: the `binloop` command."""

from binloop.cli import main

raise SystemExit(main())
