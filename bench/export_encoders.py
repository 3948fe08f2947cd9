#!/usr/bin/python3
"""Transformer encoders as PyTorch 1.13 exports them, with dynamic batch and sequence, for
bench/run_bench.py at short sequences (docs/performance.md, "Transformers: products as 1x1
convolutions"): torch's own nn.TransformerEncoder (post-norm GELU at opset 17, ReLU at opset 14,
pre-norm at opset 16), nn.TransformerDecoder with a causal mask and cross-attention, a
HF-BERT-style encoder with separate Q/K/V projections and an extended attention mask (MiniLM
and DistilBERT sizes), and a Whisper-like encoder (two Conv1d + GELU, learned positions,
pre-norm layers). Random weights (seed 0).

usage: /usr/bin/python3 bench/export_encoders.py [OUT_DIR]   (default /tmp/hodu-encoders)
then:  /usr/bin/python3 bench/run_bench.py --threads 2 --max-isa host avx2 --shape x=1x16x384 OUT_DIR/enc_gelu_o17.onnx
       (ids=1x16 --shape mask=1x16 for minilm/distilbert, mel=1x80x400 for whisper_enc)
"""
import math
import os
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/hodu-encoders"


class Enc(nn.Module):
    def __init__(s, d=384, h=6, L=4, ff=1536, act="gelu", norm_first=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation=act, batch_first=True, norm_first=norm_first)
        s.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
    def forward(s, x): return s.enc(x)

class Dec(nn.Module):
    def __init__(s, d=256, h=4, L=3, ff=1024):
        super().__init__()
        layer = nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, batch_first=True)
        s.dec = nn.TransformerDecoder(layer, L)
    def forward(s, x, mem):
        T = x.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        return s.dec(x, mem, tgt_mask=mask)

class MiniLM(nn.Module):  # HF-BERT-like: embeddings, extended attention mask, erf gelu
    def __init__(s, V=8000, d=384, h=12, L=6, ff=1536):
        super().__init__()
        s.h = h; s.emb = nn.Embedding(V, d); s.pos = nn.Embedding(512, d); s.typ = nn.Embedding(2, d); s.ln = nn.LayerNorm(d, eps=1e-12)
        s.layers = nn.ModuleList([nn.ModuleDict(dict(q=nn.Linear(d, d), k=nn.Linear(d, d), v=nn.Linear(d, d), o=nn.Linear(d, d),
            ln1=nn.LayerNorm(d, eps=1e-12), f1=nn.Linear(d, ff), f2=nn.Linear(ff, d), ln2=nn.LayerNorm(d, eps=1e-12))) for _ in range(L)])
    def forward(s, ids, mask):
        B, T = ids.shape
        pos = torch.arange(T).unsqueeze(0)
        x = s.ln(s.emb(ids) + s.pos(pos) + s.typ(torch.zeros_like(ids)))
        ext = (1.0 - mask[:, None, None, :].float()) * -10000.0
        dh = x.shape[-1] // s.h
        for l in s.layers:
            sh = lambda t: t.view(B, T, s.h, dh).permute(0, 2, 1, 3)
            q, k, v = sh(l["q"](x)), sh(l["k"](x)), sh(l["v"](x))
            a = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh) + ext
            a = a.softmax(-1)
            c = torch.matmul(a, v).permute(0, 2, 1, 3).contiguous().view(B, T, -1)
            x = l["ln1"](x + l["o"](c))
            x = l["ln2"](x + l["f2"](nn.functional.gelu(l["f1"](x))))
        return x

class Whisper(nn.Module):
    def __init__(s, n_mels=80, d=384, h=6, L=4, ctx=1500):
        super().__init__()
        s.c1 = nn.Conv1d(n_mels, d, 3, padding=1); s.c2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        s.pos = nn.Parameter(torch.randn(ctx, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        s.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False); s.ln = nn.LayerNorm(d)
    def forward(s, mel):
        x = nn.functional.gelu(s.c1(mel)); x = nn.functional.gelu(s.c2(x)).permute(0, 2, 1)
        x = x + s.pos[: x.shape[1]]
        return s.ln(s.enc(x))

def ex(m, args, names, dyn, f, opset):
    m.eval()
    os.makedirs(out, exist_ok=True)
    torch.onnx.export(m, args, os.path.join(out, f), input_names=names, output_names=["y"], dynamic_axes=dyn,
                      opset_version=opset, do_constant_folding=True)
    print("wrote", os.path.join(out, f))


seq = {"x": {0: "B", 1: "T"}, "y": {0: "B", 1: "T"}}
tokens = {"ids": {0: "B", 1: "T"}, "mask": {0: "B", 1: "T"}, "y": {0: "B", 1: "T"}}
ids = (torch.randint(0, 8000, (1, 16)), torch.ones(1, 16, dtype=torch.int64))
ex(Enc(), (torch.randn(1, 16, 384),), ["x"], seq, "enc_gelu_o17.onnx", 17)
ex(Enc(d=512, h=8, L=6, ff=2048, act="relu"), (torch.randn(1, 16, 512),), ["x"], seq, "enc_relu_o14.onnx", 14)
ex(Enc(d=256, h=4, L=4, ff=1024, norm_first=True), (torch.randn(1, 16, 256),), ["x"], seq, "enc_prenorm_o16.onnx", 16)
ex(Dec(), (torch.randn(1, 16, 256), torch.randn(1, 20, 256)), ["x", "mem"],
   {"x": {0: "B", 1: "T"}, "mem": {0: "B", 1: "S"}, "y": {0: "B", 1: "T"}}, "dec_o17.onnx", 17)
ex(MiniLM(), ids, ["ids", "mask"], tokens, "minilm_o14.onnx", 14)
ex(MiniLM(V=30522, d=768, h=12, L=6, ff=3072), ids, ["ids", "mask"], tokens, "distilbert_o15.onnx", 15)
ex(Whisper(), (torch.randn(1, 80, 400),), ["mel"], {"mel": {0: "B", 2: "F"}, "y": {0: "B", 1: "T"}},
   "whisper_enc_o17.onnx", 17)
