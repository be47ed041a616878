"""`python -m fusion_server demo | info | bench`.

The library layers never import the user API (`clients`); this entry point is the one
exception, because the commands are programs written against that API.
"""

import importlib
import sys

if __name__ == "__main__":
    sys.exit(importlib.import_module("clients.cli").main())
