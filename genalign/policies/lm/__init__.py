"""Pieces of the causal-LM policy adapter: prompt encoding, chunked log-probs, LoRA, reference model."""
