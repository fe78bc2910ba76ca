"""`python -m harness.cli`: the `kvscope` command (children of a run are started this way)."""

import sys

from harness.cli.kvscope import main

sys.exit(main())
