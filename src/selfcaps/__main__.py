"""``python -m selfcaps``."""

import sys

from selfcaps.cli import main

sys.exit(main())
