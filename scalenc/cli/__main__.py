"""``python -m scalenc.cli``: the ``scalenc`` command."""

import sys

from scalenc.cli.app import main

sys.exit(main())
