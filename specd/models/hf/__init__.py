"""The Hugging Face backend: a transformers causal LM behind the core's CausalLM protocol (its slot
cache, its steps' inputs, its head, CUDA graphs), and loading models and tokenizers as one typed error."""
