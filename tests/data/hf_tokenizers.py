"""tests/data/hf_tokenizers.py MEGAC: megac's ids equal Hugging Face `tokenizers`' ids, document
for document, on the default corpus (Debian's fortunes, as scripts/run-default.sh reads it),
for byte-level BPE tokenizers trained by `tokenizers` and given to `megac preprocess` as
Megatron gives them: GPT-2 style (ByteLevel with GPT-2's regex) as tokenizer.json and as
vocab.json + merges.txt, and Llama-3 style (Split with Llama-3's regex, ByteLevel, BOS by
TemplateProcessing, ignore_merges). Also: generate encodes a prompt the same way, and
WordPiece and a normalizer are refused with one line naming them."""
import glob, json, os, subprocess, sys, tempfile
import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers, Regex, normalizers

MEGAC = sys.argv[1]
F = "/usr/share/games/fortunes"
files = sorted(f for f in glob.glob(f"{F}/*") if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
if not files:
    print("fortunes not installed (apt-get install fortunes): skipped")
    sys.exit(77)
docs = []  # as megac's --doc-separator %: a line equal to "%" ends a document; empty ones dropped
for f in files:
    cur = []
    for line in open(f, encoding="utf-8").read().splitlines(keepends=True):
        if line.rstrip("\n") == "%":
            docs.append("".join(cur)); cur = []
        else:
            cur.append(line)
    docs.append("".join(cur))
docs = [d for d in docs if d]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def run(*args, ok=True):
    r = subprocess.run([MEGAC, *map(str, args)], capture_output=True, text=True)
    if ok and r.returncode != 0:
        sys.exit(f"megac {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def h5(path, name, dtype):
    raw = f"{path}.{name.strip('/')}.bin"
    subprocess.run(["h5dump", "-d", name, "-b", "LE", "-o", raw, path], check=True, capture_output=True)
    return np.fromfile(raw, dtype=dtype)


def megac_docs(path, V):
    toks = h5(path, "/tokens", np.uint16 if V <= 65536 else np.uint32)
    off = h5(path, "/doc_offsets", np.uint64)
    return [toks[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]


def train(style, wd):
    eod = "<|endoftext|>" if style == "gpt2" else "<|end_of_text|>"
    specials = [eod] if style == "gpt2" else ["<|begin_of_text|>", eod]
    tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    tr = trainers.BpeTrainer(vocab_size=1000, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=tr)
    d = f"{wd}/{style}"
    os.makedirs(d)
    tok.save(f"{d}/tokenizer.json")
    tok.model.save(d)  # vocab.json + merges.txt
    return tok, tok.token_to_id(eod)


def compare(name, path, tok, eod):
    V = tok.get_vocab_size()
    theirs = [e.ids + [eod] for e in tok.encode_batch(docs)]
    ours = megac_docs(path, V)
    assert len(ours) == len(theirs), f"{name}: {len(ours)} documents, HF {len(theirs)}"
    bad = [i for i in range(len(ours)) if ours[i] != theirs[i]]
    assert not bad, f"{name}: {len(bad)} documents differ, first {bad[0]}:\n megac {ours[bad[0]][:40]}\n hf    {theirs[bad[0]][:40]}"
    n = sum(map(len, ours))
    print(f"{name}: {len(ours)} of {len(theirs)} documents equal HF tokenizers' ids ({n} tokens, vocab {V})")


with tempfile.TemporaryDirectory() as wd:
    jsonl = f"{wd}/docs.jsonl"
    with open(jsonl, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    n = run("preprocess", "--input", *files, "--doc-separator", "%", "--output", f"{wd}/byte.h5").stdout
    assert f" {len(docs)} documents" in n, f"the corpus is {len(docs)} documents here, megac: {n}"
    for style in ("gpt2", "llama3"):
        tok, eod = train(style, wd)
        d = f"{wd}/{style}"
        out = f"{wd}/{style}.h5"
        r = run("preprocess", "--input", jsonl, "--output", out, "--tokenizer-type", "HuggingFaceTokenizer",
                "--tokenizer-model", f"{d}/tokenizer.json")
        assert f"end-of-document id {eod}; padded vocabulary 1024 " in r.stdout, r.stdout
        compare(f"{style} tokenizer.json", out, tok, eod)
        if style == "gpt2":
            run("preprocess", "--input", jsonl, "--output", out, "--tokenizer-type", "GPT2BPETokenizer",
                "--vocab-file", f"{d}/vocab.json", "--merge-file", f"{d}/merges.txt")
            compare("gpt2 vocab.json + merges.txt", out, tok, eod)
        text = "You will be hungry again in one hour.\n  Don't panic: 12345 ünïcödé,   spaces!\r\n"
        r = subprocess.run([MEGAC, "tokenizer", "encode", "--tokenizer", f"{d}/tokenizer.json"], input=text,
                           capture_output=True, text=True, check=True)
        want = tok.encode(text, add_special_tokens=False).ids
        assert [int(x) for x in r.stdout.split()] == want, f"{style}: encode {r.stdout} / {want}"
    # refused, naming the part
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wp.save(f"{wd}/wp.json")
    r = run("preprocess", "--input", jsonl, "--output", f"{wd}/x.h5", "--tokenizer-type", "HuggingFaceTokenizer",
            "--tokenizer-model", f"{wd}/wp.json", ok=False)
    assert r.returncode == 2 and "model WordPiece is not supported" in r.stderr, r.stderr
    t = json.load(open(f"{wd}/gpt2/tokenizer.json"))
    t["normalizer"] = {"type": "NFKC"}
    json.dump(t, open(f"{wd}/nfkc.json", "w"))
    r = run("preprocess", "--input", jsonl, "--output", f"{wd}/x.h5", "--tokenizer-type", "HuggingFaceTokenizer",
            "--tokenizer-model", f"{wd}/nfkc.json", ok=False)
    assert r.returncode == 2 and "normalizer NFKC is not supported" in r.stderr, r.stderr
    r = run("preprocess", "--input", jsonl, "--output", f"{wd}/x.h5", "--tokenizer-type", "SentencePieceTokenizer",
            "--tokenizer-model", f"{wd}/wp.json", ok=False)
    assert r.returncode == 2 and "not a SentencePiece model file" in r.stderr, r.stderr
    print("refused: WordPiece, NFKC, a tokenizer.json as SentencePieceTokenizer's tokenizer.model")
print("hf_tokenizers: ok")
