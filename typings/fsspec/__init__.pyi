# fsspec's top level, as webagent.batch.outputs uses it.
from . import config as config
from .registry import available_protocols as available_protocols
from .registry import get_filesystem_class as get_filesystem_class
from .spec import AbstractFileSystem as AbstractFileSystem
