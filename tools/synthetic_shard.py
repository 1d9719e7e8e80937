# Writes an llm.c token shard (version 1: 256 int32 header, then uint16 tokens) drawn from a fixed
# random order-1 Markov chain in which every token has a few likely successors: text a model can
# learn quickly, for loss-curve checks on machines without a corpus (tools/gpu-check.sh).
#   python3 tools/synthetic_shard.py OUT.bin --tokens 2000000 --vocab 512 --seed 1
import argparse
import array
import random
import struct


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out")
    p.add_argument("--tokens", type=int, default=2_000_000)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--successors", type=int, default=4, help="likely next tokens per token")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    assert 0 < a.vocab <= 65536, "version-1 shards hold uint16 tokens"
    rng = random.Random(a.seed)
    successors = [[rng.randrange(a.vocab) for _ in range(a.successors)] for _ in range(a.vocab)]
    tokens = array.array("H", bytes(2 * a.tokens))
    t = 0
    for i in range(a.tokens):
        # one token in ten is uniform, so every id appears
        t = rng.randrange(a.vocab) if rng.random() < 0.1 else successors[t][rng.randrange(a.successors)]
        tokens[i] = t
    with open(a.out, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, a.tokens) + bytes(4 * 253))
        f.write(tokens.tobytes())  # little-endian on x86-64 and Arm


if __name__ == "__main__":
    main()
