# Checks an FP8 export against PyTorch's quantization of the same weights: every F8_E4M3 tensor of
# FP8_DIR/model.safetensors must hold exactly the codes, and its `_scale_inv` exactly the scales, that
# torch_gpt2.fp8_block_quantize computes from F32_DIR's tensor of that name in R x C blocks; every other
# tensor must equal F32_DIR's rounded to the FP8 file's type. Prints one line and exits 0 when all agree.
# Usage: /usr/bin/python3 tests/reference/check_fp8_export.py F32_DIR FP8_DIR R C
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402


def main(f32_dir, fp8_dir, rows, cols):
    exact = tg.load_safetensors(os.path.join(f32_dir, "model.safetensors"))
    stored, dtypes = tg.load_safetensors(os.path.join(fp8_dir, "model.safetensors"), with_dtypes=True)
    quantized = [n for n, d in dtypes.items() if d == "F8_E4M3"]
    if not quantized:
        sys.exit("no F8_E4M3 tensor in " + fp8_dir)
    for name in quantized:
        codes, scales = tg.fp8_block_quantize(exact[name].numpy(), (rows, cols))
        if not np.array_equal(stored[name].numpy(), codes):
            sys.exit(f"{name}: codes differ from PyTorch's at {int((stored[name].numpy() != codes).sum())} elements")
        if not np.array_equal(stored[name + "_scale_inv"].numpy(), scales):
            sys.exit(f"{name}_scale_inv: scales differ from PyTorch's")
    for name, tensor in stored.items():
        if name in quantized or name.endswith("_scale_inv"):
            continue
        want = exact[name].numpy()
        if dtypes[name] == "BF16":
            want = tg._bf16_bits_to_float32(tg._float32_to_bf16_bits(want))
        if not np.array_equal(tensor.numpy(), want):
            sys.exit(f"{name}: {dtypes[name]} values differ from the F32 export's")
    print(f"{len(quantized)} FP8 tensors match PyTorch's quantization bit for bit; {len(stored) - 2 * len(quantized)} "
          "others match")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: check_fp8_export.py F32_DIR FP8_DIR R C")
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
