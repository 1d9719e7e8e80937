"""Reads a safetensors file with struct, json and torch.frombuffer only (independently of Tessera's
reader) and writes what PyTorch sees as JSON: header length, metadata, and per tensor its dtype,
shape and flattened values; for HF Conv1D weights (in, out) also y = x @ W + b for x[i] = i % 7 - 3,
the product GPT-2's Conv1D computes. Usage: read_safetensors.py FILE.safetensors OUT.json"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "F64": torch.float64}
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_bytes,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_bytes])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + header_bytes:]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = (entry["dtype"], flat.reshape(entry["shape"]))
    return header_bytes, metadata, tensors


def main():
    header_bytes, metadata, tensors = read(sys.argv[1])
    out = {"header_bytes": header_bytes, "metadata": metadata, "tensors": {}}
    for name, (dtype, t) in tensors.items():
        entry = {"dtype": dtype, "shape": list(t.shape), "values": t.double().reshape(-1).tolist()}
        if name.endswith(CONV1D):
            weight = t.float()
            bias = tensors[name[:-len("weight")] + "bias"][1].float()
            x = (torch.arange(weight.shape[0]) % 7 - 3).float()
            entry["conv1d"] = torch.addmm(bias, x[None, :], weight)[0].double().tolist()
        out["tensors"][name] = entry
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
