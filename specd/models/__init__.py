"""Model families behind the core's CausalLM protocol (Hugging Face causal LMs)."""
