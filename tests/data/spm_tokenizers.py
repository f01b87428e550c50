"""tests/data/spm_tokenizers.py MEGAC: megac's ids equal the `sentencepiece` package's, document
for document, for SentencePiece models trained here by that package on Debian's fortunes (BPE
and unigram with byte fallback and the default nmt_nfkc normalizer; unigram with the identity
normalizer and no byte fallback; BPE without the dummy prefix and without removing extra
spaces), given to `megac preprocess` as Megatron's three tokenizer types give them
(Llama2Tokenizer: BOS + ids + EOS; GPTSentencePieceTokenizer: ids + EOS;
SentencePieceTokenizer: Megatron's added special ids, split out of the text, + <EOD>); and
equal Hugging Face `tokenizers`' ids for the tokenizer.json that transformers converts the BPE
model to (Llama-2's legacy Prepend + Replace normalizer, and Metaspace as Mistral's). The
documents include non-ASCII text and characters outside the vocabulary (byte fallback).
Prints megac's and sentencepiece's encode speed on the corpus. Also: a missing or corrupt
tokenizer.model is one line and exit 2."""
import glob, json, os, subprocess, sys, tempfile, time
import numpy as np
import sentencepiece as spm

MEGAC = sys.argv[1]
F = "/usr/share/games/fortunes"
files = sorted(f for f in glob.glob(f"{F}/*") if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
if not files:
    print("fortunes not installed (apt-get install fortunes): skipped")
    sys.exit(77)
docs = []  # a line equal to "%" ends a document, as megac's --doc-separator %
for f in files:
    cur = []
    for line in open(f, encoding="utf-8").read().splitlines(keepends=True):
        if line.rstrip("\n") == "%":
            docs.append("".join(cur)); cur = []
        else:
            cur.append(line)
    docs.append("".join(cur))
docs = [d for d in docs if d]
EXTRA = ["Ünïcödé café — naïve façade, Straße", "日本語のテキストと中文", "emoji 🎉🚀 and 𝄞𝄞 clef",
         "ＦＵＬＬＷＩＤＴＨ １２３ and the ﬁ ligature ½", "tabs\tand  double  spaces  ", "   leading and trailing   ",
         "line one\nline two\r\n\n", "<s> and </s> and <EOD> inside <MASK>text", "control \x01\x7f chars",
         "\u00a0non-breaking\u2003em space", "ﾊﾝｶｸ half-width", "a\u0301 combining", "🙂", " ", "x"]
docs += EXTRA


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


def compare(name, path, theirs, V, ref="sentencepiece"):
    ours = megac_docs(path, V)
    assert len(ours) == len(theirs), f"{name}: {len(ours)} documents, {ref} {len(theirs)}"
    bad = [i for i in range(len(ours)) if ours[i] != theirs[i]]
    assert not bad, (f"{name}: {len(bad)} documents differ, first {bad[0]} {docs[bad[0]][:60]!r}:\n"
                     f" megac {ours[bad[0]][:40]}\n {ref} {theirs[bad[0]][:40]}")
    print(f"{name}: {len(ours)} of {len(theirs)} documents equal {ref}'s ids ({sum(map(len, ours))} tokens)")


def megatron_sp(sp):
    """Megatron's SentencePieceTokenizer: its vocabulary additions and tokenize, as documented there."""
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    special = {}
    names = ["<CLS>", "<SEP>", "<EOD>", "<MASK>"]
    for i, dflt in ((sp.pad_id(), "<PAD>"), (sp.bos_id(), "<BOS>"), (sp.eos_id(), "<EOS>")):
        names.append(sp.id_to_piece(i) if 0 <= i < sp.get_piece_size() else dflt)
    for t in names:
        vocab.setdefault(t, len(vocab))
        special[t] = vocab[t]

    def tokenize(text):
        ids = []
        while True:
            hits = [(text.find(t), k, t) for k, t in enumerate(special) if text.find(t) >= 0]
            if not hits:
                return ids + sp.encode(text)
            at, _, t = min(hits)
            ids += sp.encode(text[:at]) + [special[t]]
            text = text[at + len(t):]
    return tokenize, len(vocab), special["<EOD>"]


with tempfile.TemporaryDirectory() as wd:
    jsonl = f"{wd}/docs.jsonl"
    with open(jsonl, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    train_txt = f"{wd}/train.txt"
    with open(train_txt, "w") as f:  # a few thousand lines: seconds to train
        f.write("".join(docs[:1500]))
    models = {
        "bpe": dict(model_type="bpe", byte_fallback=True),
        "unigram": dict(model_type="unigram", byte_fallback=True),
        "unigram-identity": dict(model_type="unigram", normalization_rule_name="identity"),
        "bpe-raw-spaces": dict(model_type="bpe", byte_fallback=True, add_dummy_prefix=False,
                               remove_extra_whitespaces=False),
    }
    for name, kw in models.items():
        t0 = time.time()
        spm.SentencePieceTrainer.train(input=train_txt, model_prefix=f"{wd}/{name}", vocab_size=1000,
                                       minloglevel=2, num_threads=1, **kw)
        sp = spm.SentencePieceProcessor(model_file=f"{wd}/{name}.model")
        print(f"{name}: trained in {time.time() - t0:.1f} s, {sp.get_piece_size()} pieces")
        V = sp.get_piece_size()
        t0 = time.perf_counter()
        plain = sp.encode(docs, num_threads=1)
        sp_s = time.perf_counter() - t0
        types = [("Llama2Tokenizer", [[sp.bos_id()] + x + [sp.eos_id()] for x in plain], V),
                 ("GPTSentencePieceTokenizer", [x + [sp.eos_id()] for x in plain], V)]
        tok, Vm, eod = megatron_sp(sp)
        types.append(("SentencePieceTokenizer", [tok(d) + [eod] for d in docs], Vm))
        if name != "bpe":  # the types' id layouts once; the encoders on every model
            types = types[1:2]
        for ty, want, vocab in types:
            out = f"{wd}/{name}-{ty}.h5"
            r = run("preprocess", "--input", jsonl, "--output", out, "--tokenizer-type", ty,
                    "--tokenizer-model", f"{wd}/{name}.model")
            compare(f"{name} {ty}", out, want, vocab)
            if ty == "GPTSentencePieceTokenizer":
                mb = sum(len(d.encode()) for d in docs) / 1e6
                line = r.stdout.splitlines()[0]
                print(f"speed {name}: sentencepiece {mb / sp_s:.2f} MB/s (encode of {len(docs)} documents, "
                      f"one thread, {sp_s:.3f} s); megac preprocess: {line.split(' in ')[-1]}")
    # Hugging Face tokenizer.json of the same family, as transformers converts the BPE model.
    from tokenizers import Tokenizer
    from transformers import LlamaTokenizerFast
    hf_docs = [d for d in docs if "<s>" not in d and "</s>" not in d]  # HF splits added tokens out of text
    with open(f"{wd}/hf.jsonl", "w") as f:
        for d in hf_docs:
            f.write(json.dumps({"text": d}) + "\n")
    for legacy, prefix in ((True, True), (False, True), (True, None), (False, None)):
        d = f"{wd}/hf-{'legacy' if legacy else 'metaspace'}-{prefix}"
        LlamaTokenizerFast(vocab_file=f"{wd}/bpe.model", legacy=legacy, add_prefix_space=prefix,
                           from_slow=True).save_pretrained(d)
        hf = Tokenizer.from_file(f"{d}/tokenizer.json")
        j = json.load(open(f"{d}/tokenizer.json"))
        kinds = (json.dumps(j["normalizer"]) if j["normalizer"] else "none",
                 json.dumps(j["pre_tokenizer"]) if j["pre_tokenizer"] else "none")
        eos = hf.token_to_id("</s>")
        want = [e.ids + [eos] for e in hf.encode_batch(hf_docs)]
        out = f"{d}.h5"
        run("preprocess", "--input", f"{wd}/hf.jsonl", "--output", out, "--tokenizer-type", "HuggingFaceTokenizer",
            "--tokenizer-model", d)
        docs_saved, docs = docs, hf_docs
        compare(f"tokenizer.json (normalizer {kinds[0]}, pre-tokenizer {kinds[1]})", out, want,
                hf.get_vocab_size(), ref="HF tokenizers")
        docs = docs_saved
    # and one made by `tokenizers` itself: Metaspace with split (each "▁" starts a word), unknown
    # characters fused into one <unk> (its vocabulary has no <0xNN> pieces)
    from tokenizers import models, pre_tokenizers, processors, trainers
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    t.train_from_iterator(docs[:1500], trainer=trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False, limit_alphabet=100))
    d = f"{wd}/hf-split"
    os.makedirs(d)
    t.save(f"{d}/tokenizer.json")
    want = [e.ids + [t.token_to_id("</s>")] for e in t.encode_batch(hf_docs)]
    run("preprocess", "--input", f"{wd}/hf.jsonl", "--output", f"{d}.h5", "--tokenizer-type", "HuggingFaceTokenizer",
        "--tokenizer-model", f"{d}/tokenizer.json")
    docs_saved, docs = docs, hf_docs
    compare("tokenizers' own (Metaspace always, split; <unk> fused)", f"{d}.h5", want, t.get_vocab_size(),
            ref="HF tokenizers")
    docs = docs_saved
    # the dataset's tokenizer description reloads (megac generate / export read it)
    r = subprocess.run([MEGAC, "tokenizer", "encode", "--tokenizer", f"{d}/tokenizer.json"], input=EXTRA[0],
                       capture_output=True, text=True, check=True)
    assert [int(x) for x in r.stdout.split()] == t.encode(EXTRA[0], add_special_tokens=False).ids, r.stdout
    # errors: one line, exit 2
    open(f"{wd}/bad.model", "wb").write(b"\x0a\xff\xff\xff\x0fnot a model")
    for path in (f"{wd}/missing.model", f"{wd}/bad.model", jsonl):
        r = run("preprocess", "--input", jsonl, "--output", f"{wd}/x.h5", "--tokenizer-type", "Llama2Tokenizer",
                "--tokenizer-model", path, ok=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and path in r.stderr, (r.returncode, r.stderr)
        print(f"refused: {r.stderr.strip()}")
print("spm_tokenizers: ok")
