"""``python -m placement.generate``: write a generated problem as native JSON."""
import sys

from . import main

sys.exit(main())
