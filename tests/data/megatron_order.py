#!/usr/bin/env python3
"""tests/data/megatron_order.py MEGAC TMPDIR: megac's training samples on Megatron .bin/.idx
data are Megatron-Core's, token for token.

The prefixes are written by Megatron-Core's own IndexedDatasetBuilder (uint16 tokens, some
documents of several sequences, a few empty sequences, one empty document). For each case
Megatron-Core's BlendedMegatronDatasetBuilder builds the train / valid / test datasets
(GPTDataset, BlendedDataset: its numpy RandomState shuffles and its compiled helpers), and
`megac data samples` writes the first N training samples for the same flags; every token of
every sample must agree. Cases: one prefix (a separate final epoch and not), a weighted blend
of two prefixes, a weighted single prefix (the 0.5% surplus changes its epochs), an
unweighted blend of two; split 98,1,1; seed 4321 (and 77).

megatron.core/__init__.py imports its training stack, which Debian's torch 1.13 cannot run;
only the datasets package is needed, so the package is entered without its __init__ (the
modules it would import are stood in for by two small stubs: a logger and a tokenizer base).
"""
import os, subprocess, sys, types

import numpy


def import_mcore():
    import megatron
    core = os.path.join(list(megatron.__path__)[0], "core")
    def stub(name, path=None, **kw):
        m = types.ModuleType(name)
        if path:
            m.__path__ = [path]
        m.__dict__.update(kw)
        sys.modules[name] = m
    stub("megatron.core", core)
    stub("megatron.core.utils", log_single_rank=lambda *a, **k: None)
    class MegatronTokenizerBase:  # only its name is used by the datasets package
        pass
    stub("megatron.core.tokenizers", MegatronTokenizerBase=MegatronTokenizerBase)
    import torch
    torch.distributed.get_rank = lambda *a, **k: 0  # the builders ask it only with a cache path
    from megatron.core.datasets import helpers_cpp  # noqa: F401  (the compiled helpers must load)
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    return BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig, IndexedDatasetBuilder


Builder, GPTDataset, GPTDatasetConfig, IndexedDatasetBuilder = import_mcore()
import torch  # noqa: E402
from importlib.metadata import version  # noqa: E402

EOD = 256


class Tok:  # what GPTDataset reads of a tokenizer
    vocab_size = EOD + 1
    eod = EOD
    pad = -1
    unique_identifiers = {"class": "Tok"}


def write_prefix(prefix, n_docs, seed):
    r = numpy.random.RandomState(seed)
    b = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    for d in range(n_docs):
        ids = list(r.randint(0, EOD, size=r.randint(3, 60))) + [EOD]
        if d == 5:
            lengths = []  # an empty document (megac's reader drops it; Megatron has no sequence)
            ids = []
        elif d % 7 == 0:
            lengths = [len(ids) // 2, 0, len(ids) - len(ids) // 2]  # an empty sequence inside
        elif d % 3 == 0:
            lengths = [len(ids) // 3, len(ids) - len(ids) // 3]
        else:
            lengths = [len(ids)]
        b.add_document(torch.tensor(ids, dtype=torch.int64), lengths)
    b.finalize(prefix + ".idx")


def megatron_samples(blend, weights, split, T, seed, sizes, cache):
    cfg = GPTDatasetConfig(random_seed=seed, sequence_length=T, blend=(blend, weights), split=split,
                           tokenizer=Tok(), reset_position_ids=False, reset_attention_mask=False,
                           eod_mask_loss=False, path_to_cache=cache)
    train = Builder(GPTDataset, sizes, lambda: True, cfg).build()[0]
    parts = train.datasets if hasattr(train, "datasets") else [train]
    info = []
    for d in parts:  # epochs and separate_final_epoch, by gpt_dataset.py's own rule
        L = d._get_num_tokens_per_epoch()
        E = d._get_num_epochs(L)
        sep = E > 1 and d.num_samples - ((E - 1) * L - 1) // T < int(0.8 * ((L - 1) // T))
        info.append(f"{E} epoch(s){', final one separate' if sep else ''}")
    out = []
    for i in range(sizes[0]):
        if hasattr(train, "dataset_index"):  # BlendedDataset: its dataset, then that one's sample
            ds, j = train.datasets[train.dataset_index[i]], int(train.dataset_sample_index[i])
        else:
            ds, j = train, i
        out.append(ds._query_document_sample_shuffle_indices(j)[0])
    return numpy.array(out, dtype=numpy.int64), "; ".join(info)


def megac_samples(megac, data_path, split, T, seed, G, iters, out):
    cmd = [megac, "data", "samples", "--first", str(G * iters), "--output", out, "--data-path", *data_path,
           "--split", split, "--seq-length", str(T), "--seed", str(seed), "--vocab-size", str(EOD),
           "--global-batch-size", str(G), "--micro-batch-size", str(G), "--train-iters", str(iters),
           "--eval-iters", "1", "--num-layers", "1", "--hidden-size", "8", "--num-attention-heads", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"FAIL: {' '.join(cmd)} -> exit {p.returncode}: {p.stdout[-1500:]}{p.stderr[-1500:]}")
    return numpy.fromfile(out, dtype="<i4").reshape(G * iters, T + 1)


def main():
    megac, tmp = sys.argv[1], sys.argv[2]
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    write_prefix(a, 300, 1)
    write_prefix(b, 200, 2)
    T, G = 32, 8
    cases = [  # name, megac's --data-path, Megatron's blend and weights, split, seed, iters
        ("one prefix, separate final epoch", [a], [a], None, "98,1,1", 4321, 40),
        ("one prefix, whole final epoch", [a], [a], None, "98,1,1", 4321, 70),
        ("one prefix, seed 77, split 90,5,5", [a], [a], None, "90,5,5", 77, 25),
        ("weighted blend 0.3 a 0.7 b", ["0.3", a, "0.7", b], [a, b], [0.3, 0.7], "98,1,1", 4321, 50),
        ("weighted single prefix", ["1.0", a], [a], [1.0], "98,1,1", 4321, 34),
        ("unweighted blend a b", [a, b], [a, b], None, "90,5,5", 4321, 30),
    ]
    fails = 0
    for k, (name, dp, blend, weights, split, seed, iters) in enumerate(cases):
        n = G * iters
        want, info = megatron_samples(blend, weights, split, T, seed, [n, G, G], os.path.join(tmp, f"cache{k}"))
        got = megac_samples(megac, dp, split, T, seed, G, iters, os.path.join(tmp, f"s{k}.bin"))
        if want.shape != got.shape or not numpy.array_equal(want, got):
            bad = [i for i in range(min(len(want), len(got))) if not numpy.array_equal(want[i], got[i])]
            print(f"FAIL: {name}: {len(bad)} of {n} samples differ, first at {bad[:1]}: "
                  f"megatron {want[bad[0]][:8] if bad else want.shape} megac {got[bad[0]][:8] if bad else got.shape}")
            fails += 1
        else:
            print(f"ok: {name} ({info}): {n} samples of {T + 1} tokens equal")
        if "final epoch" in name and (("separate" in name) != ("separate" in info) or "1 epoch" in info):
            print(f"FAIL: {name}: the case does not exercise what it names ({info})")
            fails += 1
    print(f"compared with megatron-core {version('megatron-core')}, numpy {numpy.__version__}")
    if fails:
        raise SystemExit(f"megatron_order: {fails} case(s) differ")
    print("megatron_order: ok")


main()
