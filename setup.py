"""Thin shim for tools that still run `python setup.py ...`.

The build is owned by pyproject.toml (scikit-build-core) and CMakeLists.txt; this file only hands
`python setup.py install` over to pip so that both paths build the extension the same way.
"""

import subprocess
import sys

if __name__ == "__main__":
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "."]))
