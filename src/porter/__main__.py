import os
import sys

# ``python -m porter`` puts the current folder first on sys.path; run inside a target
# repository, its own click.py or rich.py would be imported, i.e. run. Porter never
# runs the code it ports, so that folder goes (porter itself is already found).
_cwd = os.getcwd()
sys.path[:] = [p for p in sys.path if p not in ("", ".", _cwd)]

from porter.cli.entry import main  # noqa: E402

main()
