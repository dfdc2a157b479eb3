"""`python -m gemmgen` is the `gemmgen` command."""

from gemmgen.cli import main

raise SystemExit(main())
