"""Number formats and input shapes: the dtype table, GGML block formats, input-range presets, memory layouts."""
