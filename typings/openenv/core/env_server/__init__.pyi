from .http_server import create_app as create_app
from .interfaces import Environment as Environment
from .types import Action as Action
from .types import ConcurrencyConfig as ConcurrencyConfig
from .types import Observation as Observation
from .types import State as State
