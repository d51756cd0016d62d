"""The token-LM core shared by the causal-LM, VLM and masked-diffusion-LM families: the base policy class, reference
policy and checkpoints (:mod:`~genalign.policies.lm.core`), LoRA options (:mod:`~genalign.policies.lm.lora`), what a
checkpoint folder carries to load without genalign (:mod:`~genalign.policies.lm.export`), prompt encoding, chunked
log-probs and token features, segment boundaries, tokenizers and tiny test models."""
