"""The layer compiler: named residual fields, a block library, a layer allocator and an assembler
that writes Qwen3.5 decoder-layer tensors (tracr's craft, for Gated DeltaNet layers)."""
