"""The llama.cpp backend: a GGUF file on llama.cpp behind the core's CausalLM protocol (lib.py: the
binding, a file loaded once, a context scoring packed rows of several sequences in one call)."""
