"""Likelihood proxies: estimates of a sequence's log-likelihood where the model family has no exact one.

Masked diffusion language models: :mod:`genalign.likelihood.masked_diffusion` (one-step, Monte-Carlo ELBO, coupled
complementary masks, SPG bounds, decoding-trace replay), all registered in :data:`LIKELIHOOD_PROXIES`.
"""

from genalign.likelihood.masked_diffusion import LIKELIHOOD_PROXIES, LikelihoodProxy, ProxyOutput

__all__ = ["LIKELIHOOD_PROXIES", "LikelihoodProxy", "ProxyOutput"]
