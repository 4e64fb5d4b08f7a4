"""Model workers behind the OpenAI-compatible protocol: vLLM on GPUs, llama.cpp on the CPU."""
