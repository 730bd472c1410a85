"""context-proxy: an OpenAI-compatible proxy that manages conversation context."""

import os

# LiteLLM fetches its model cost map over the network at import unless told not
# to, and Anthropic's beta-header table on the first Anthropic call that needs a beta
# header (`context_management`, say); this package reaches no network but the
# providers', so say it before anyone imports litellm.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")

__version__ = "0.1.0"
