"""The token-LM core shared by the causal-LM, VLM and masked-diffusion-LM families: the base policy class, reference
policy, LoRA and checkpoints (:mod:`~genalign.policies.lm.core`), prompt encoding, chunked log-probs and token features,
segment boundaries, tokenizers and tiny test models."""
