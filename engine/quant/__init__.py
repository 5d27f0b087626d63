"""Weights kept in their GGUF block formats (Q8_0, K-quants, IQ4_XS, MXFP4): the type table and the weight object
the layers multiply by. The kernels that read the blocks live in `engine/kernels/{dequantize,quant_matmul,quant_moe}`."""
