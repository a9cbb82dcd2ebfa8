"""The K3 architecture: config, layers, state pools and the causal LM."""

from .config import K3Config
from .model import K3ForCausalLM
from .state import PoolExhausted, RequestState, StatePools

__all__ = ["K3Config", "K3ForCausalLM", "PoolExhausted", "RequestState", "StatePools"]
