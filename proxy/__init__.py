"""context-proxy: an OpenAI-compatible proxy that manages conversation context."""

import os

# LiteLLM fetches its model cost map over the network at import unless told not
# to; this package must start with no network at all, so say it before anyone
# imports litellm.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"
