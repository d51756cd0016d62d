"""Likelihood proxies: estimates of a sequence's log-likelihood where the model family has no exact one.

Masked diffusion language models: :mod:`genalign.policies.dlm.likelihood.masked_diffusion` (one-step, Monte-Carlo ELBO, coupled
complementary masks, SPG bounds), :mod:`genalign.policies.dlm.likelihood.trace` (decoding-trace replay),
:mod:`genalign.experimental.likelihood.quadrature` (GDPO's quadrature ELBO [36]) and :mod:`genalign.experimental.likelihood.left_to_right` (JustGRPO's left-to-right order [35]), all registered in
:data:`LIKELIHOOD_PROXIES`.
"""

from genalign.policies.dlm.likelihood import trace  # noqa: F401  (register their proxies)
from genalign.policies.dlm.likelihood.masked_diffusion import LIKELIHOOD_PROXIES, LikelihoodProxy, ProxyOutput

__all__ = ["LIKELIHOOD_PROXIES", "LikelihoodProxy", "ProxyOutput"]
