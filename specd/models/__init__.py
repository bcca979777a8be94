"""Models behind the core's CausalLM protocol, and the generation run over them: ``hf`` (the
Hugging Face backend) and ``llamacpp`` (the llama.cpp backend), each in one place; ``run`` (options,
the models a run loads and on which backend, the pipeline, results and manifest) above them. The
root holds what both backends and the run read: bounded integers, tokenizer admission, one call at
a time on a model, a model's facts, and the draft vocabulary tables (``data/``)."""
