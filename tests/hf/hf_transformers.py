#!/usr/bin/env python3
"""tests/hf/hf_transformers.py MEGAC [--tokenizer]: megac's export read by Hugging Face
transformers (run by the venv of tests/hf/setup_venv.sh; exit 77 when it is missing).

Default (mock data, V = 300, so the vocabulary is padded to 384 inside megac):
  1. a tiny GPT trained 3 iterations, exported; GPT2LMHeadModel.from_pretrained gives the
     logits of `megac generate --dump-logits` on the same tokens (fp32, relative 1e-5);
  2. greedy decoding: megac's tokens equal model.generate(do_sample=False)'s, and each
     generated token is the argmax of the training forward at its position;
  3. the HF model saved in F16 and BF16, imported by megac: the tensors are the rounded ones;
  4. a GPT-2 built by transformers itself (random init), imported: the same logits.
--tokenizer (Debian's fortunes): a BPE tokenizer trained by megac, exported as
tokenizer.json: transformers' tokenizer encodes text to megac's ids, greedy text equals, and
import brings the tokenizer back (also for the byte tokenizer).
"""
import copy, os, subprocess, sys, tempfile

import numpy as np
import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

MEGAC = sys.argv[1]
TRAIN = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
         "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
         "--lr", "1e-2", "--num-threads", "1"]
torch.manual_seed(0)


def run(*args):
    r = subprocess.run([MEGAC, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: megac {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


def megac_logits(ck, ids, path, V, tok=()):
    run("generate", "--load", ck, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", 0,
        "--dump-logits", path, *tok)
    return np.fromfile(path, dtype="<f4").reshape(len(ids), V)


def check_logits(ck, hf, wd, V, T):
    model = GPT2LMHeadModel.from_pretrained(hf).eval()
    rng = np.random.default_rng(0)
    for n in (T, 5):
        ids = [int(x) for x in rng.integers(0, V, n)]
        ours = megac_logits(ck, ids, f"{wd}/logits.bin", V)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0].double().numpy()
        rel = np.abs(ours - theirs).max() / np.abs(theirs).max()
        print(f"logits, {n} tokens: max |megac - transformers| / max |transformers| = {rel:.2e}")
        assert rel < 1e-5, "logits differ"
    return model


def check_greedy(ck, model, prompt, new, V):
    out = run("generate", "--load", ck, "--prompt-ids", ",".join(map(str, prompt)),
              "--max-new-tokens", new, "--temperature", 0, "--print-ids").split("\n")[0]
    ours = [int(x) for x in out.split()]
    with torch.no_grad():
        theirs = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new,
                                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                pad_token_id=0, synced_gpus=False)[0].tolist()
    print(f"greedy: megac {ours}\n        transformers {theirs}")
    assert ours == theirs, "greedy decoding differs"
    return ours


def check_argmax(ck, seq, n_prompt, wd, V):
    lg = megac_logits(ck, seq, f"{wd}/seq.bin", V)
    for p in range(n_prompt - 1, len(seq) - 1):
        assert int(np.argmax(lg[p])) == seq[p + 1], f"position {p}: not the forward's argmax"
    print(f"greedy tokens are the training forward's argmax at positions {n_prompt}..{len(seq) - 1}")


def check_half_import(model, ck, wd):
    for dt, name in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        d = f"{wd}/hf_{name}"
        copy.deepcopy(model).to(dt).save_pretrained(d, safe_serialization=True)
        run("import", "--hf", d, "--output", f"{wd}/ck_{name}", "--seq-length", 16,
            "--global-batch-size", 4)
        run("export", "--load", f"{wd}/ck_{name}", "--output", f"{d}_back")
        back = GPT2LMHeadModel.from_pretrained(f"{d}_back").state_dict()
        for k, v in model.state_dict().items():
            if k in back:
                want = v.to(dt).to(torch.float32)
                assert torch.equal(back[k], want), f"{name} import: {k} is not the rounded tensor"
        print(f"{name.upper()} safetensors imported: every tensor equals the {name}-rounded one")


def hf_made_model_test(wd):
    """A model transformers built (random init, its own defaults) imported by megac."""
    from transformers import GPT2Config
    cfg = GPT2Config(n_layer=2, n_embd=48, n_head=4, vocab_size=270, n_positions=32)
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(f"{wd}/hfm", safe_serialization=True)
    run("import", "--hf", f"{wd}/hfm", "--output", f"{wd}/ckm", "--global-batch-size", 4)
    ids = [int(x) for x in np.random.default_rng(1).integers(0, 270, 32)]
    ours = megac_logits(f"{wd}/ckm", ids, f"{wd}/lm.bin", 270)
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].double().numpy()
    rel = np.abs(ours - theirs).max() / np.abs(theirs).max()
    print(f"a transformers-made GPT-2 imported: logits relative difference {rel:.2e}")
    assert rel < 1e-5, "imported model's logits differ"


def mock_test(wd):
    ck, hf = f"{wd}/ck", f"{wd}/hf"
    run("train", "--mock-data", "--mock-vocab-size", 300, *TRAIN, "--train-iters", 3, "--save", ck)
    run("export", "--load", ck, "--output", hf)
    model = check_logits(ck, hf, wd, 300, 16)
    prompt = [5, 17, 260, 3]
    seq = check_greedy(ck, model, prompt, 10, 300)
    check_argmax(ck, seq, len(prompt), wd, 300)
    check_half_import(model, ck, wd)
    hf_made_model_test(wd)


def byte_tokenizer_test(wd):
    ck, hf = f"{wd}/ckb", f"{wd}/hfb"
    run("train", "--mock-data", *TRAIN, "--train-iters", 1, "--save", ck)  # V = 257: bytes + EOD
    run("export", "--load", ck, "--output", hf, "--tokenizer", "byte")
    tok = PreTrainedTokenizerFast.from_pretrained(hf)
    text = "h\u00e9llo  w\u00f6rld\n\ttabs <|endoftext|>"
    ids = tok.encode(text)
    assert ids == list(text.replace("<|endoftext|>", "").encode()) + [256], f"byte tokenizer: {ids}"
    run("import", "--hf", hf, "--output", f"{wd}/ckb2", "--seq-length", 16, "--global-batch-size", 4)
    out = run("generate", "--load", f"{wd}/ckb2", "--prompt", "ab", "--max-new-tokens", 3,
              "--temperature", 0, "--ignore-eos", "--print-ids").split("\n")[0].split()
    assert out[:2] == ["97", "98"], out
    print(f"byte tokenizer.json: ids are the UTF-8 bytes, <|endoftext|> is 256; import keeps it")


def tokenizer_test(wd):
    byte_tokenizer_test(wd)
    F = "/usr/share/games/fortunes"
    if not os.path.exists(f"{F}/fortunes"):
        print("fortunes not installed (apt-get install fortunes): skipped")
        sys.exit(77)
    run("tokenizer", "train", "--input", f"{F}/fortunes", "--vocab-size", 400, "--output", f"{wd}/tok.json",
        "--doc-separator", "%")
    run("preprocess", "--input", f"{F}/fortunes", "--output", f"{wd}/f.h5", "--tokenizer",
        f"{wd}/tok.json", "--doc-separator", "%")
    ck, hf = f"{wd}/ck", f"{wd}/hf"
    run("train", "--data-path", f"{wd}/f.h5", "--split", "99,1,0", *TRAIN, "--train-iters", 60,
        "--save", ck)
    run("export", "--load", ck, "--output", hf, "--tokenizer", f"{wd}/f.h5")
    tok = PreTrainedTokenizerFast.from_pretrained(hf)
    text = "You will be hungry again in one hour.\n  Don't panic: 1234 numbers, ünïcödé and   spaces!"
    r = subprocess.run([MEGAC, "tokenizer", "encode", "--tokenizer", f"{wd}/tok.json"], input=text,
                       capture_output=True, text=True, check=True)
    ours = [int(x) for x in r.stdout.split()]
    theirs = tok.encode(text)
    assert ours == theirs, f"tokenizer.json encodes differently:\n megac {ours}\n hf    {theirs}"
    assert tok.decode(theirs) == text
    print(f"tokenizer.json: {len(ours)} ids equal megac's, decode round-trips")
    model = check_logits(ck, hf, wd, 400, 16)
    prompt = "You will"
    ids_line, out = run("generate", "--load", ck, "--tokenizer", f"{wd}/f.h5", "--prompt", prompt,
                        "--max-new-tokens", 8, "--temperature", 0, "--print-ids").split("\n", 1)
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        g = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=8, pad_token_id=0, synced_gpus=False)[0].tolist()
    theirs = tok.decode(g, skip_special_tokens=True)
    print(f"greedy text: megac {out[:-1]!r}\n             transformers {theirs!r}")
    assert [int(x) for x in ids_line.split()] == g, f"greedy ids differ: {ids_line} / {g}"
    assert out[:-1] == theirs, "greedy text differs"
    # import keeps the tokenizer: generate needs no --tokenizer, export writes the same file
    run("import", "--hf", hf, "--output", f"{wd}/ck2", "--seq-length", 16, "--global-batch-size", 4)
    again = run("generate", "--load", f"{wd}/ck2", "--prompt", prompt, "--max-new-tokens", 8,
                "--temperature", 0)
    assert again == out, f"generate after import: {again!r} / {out!r}"
    run("export", "--load", f"{wd}/ck2", "--output", f"{wd}/hf2")
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert open(f"{hf}/{f}", "rb").read() == open(f"{wd}/hf2/{f}", "rb").read(), f"{f} changed"
    print("import kept the tokenizer: same greedy text, export writes the same tokenizer.json")


with tempfile.TemporaryDirectory() as wd:
    if "--tokenizer" in sys.argv:
        tokenizer_test(wd)
    else:
        mock_test(wd)
print("hf_transformers: ok")
