"""zps: the Python client of the zps parameter server.

``zps.Client`` talks to a cluster's servers through libzps (loaded with
ctypes: nothing to compile). ``zps.torch`` trains a PyTorch model through
it. See docs/python.md.
"""

from ._lib import ABI_VERSION, LibraryNotFound
from .client import Client, Error, Info

__version__ = "0.1.0"

__all__ = ["Client", "Error", "Info", "LibraryNotFound", "ABI_VERSION", "library_path"]


def library_path():
    """The path of the libzps this process loaded (loading it if need be)."""
    from . import _lib
    return _lib.path()
