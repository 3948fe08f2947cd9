"""torch.onnx.export recipes of the corpus: real architectures (torchvision, or
torch.nn building blocks the way a user writes them) with random weights from a
fixed seed, exported with dynamic axes.

A recipe is named in models.json ("torch": {"model": NAME, "opset": N, ...});
build(NAME) returns the module and its example inputs. Debian's torch 1.13 and
torchvision 0.14.
"""
import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class BertEncoder(nn.Module):
    """A BERT-style encoder: token + position embeddings, nn.TransformerEncoder
    with a key-padding mask from attention_mask, a tanh pooler."""

    def __init__(self, vocab=1000, d=64, heads=4, layers=2, max_len=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.norm = nn.LayerNorm(d)
        # A non-builtin activation keeps torch off its fused fast path, which
        # has no ONNX export.
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True,
                                           activation=lambda x: F.gelu(x))
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.norm(self.tok(input_ids) + self.pos(positions))
        x = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        return x, torch.tanh(self.pool(x[:, 0]))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, triu):
        super().__init__()
        self.heads, self.triu = heads, triu
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if self.triu:   # torch.triu (ONNX Trilu, opset 14+)
            future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        else:           # the same mask from two aranges (any opset)
            idx = torch.arange(t, device=x.device)
            future = idx.unsqueeze(0) > idx.unsqueeze(1)
        scores = torch.where(future, torch.full_like(scores, float("-inf")), scores)
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GptDecoder(nn.Module):
    """A GPT-style decoder: pre-norm blocks, causal mask, GELU MLP, tied head."""

    def __init__(self, vocab=512, d=64, heads=4, layers=2, max_len=128, triu=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(d), "attn": CausalSelfAttention(d, heads, triu),
                "ln2": nn.LayerNorm(d), "fc": nn.Linear(d, 4 * d), "out": nn.Linear(4 * d, d)}))
        self.ln = nn.LayerNorm(d)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.tok(input_ids) + self.pos(positions)
        for blk in self.blocks:
            x = x + blk["attn"](blk["ln1"](x))
            x = x + blk["out"](F.gelu(blk["fc"](blk["ln2"](x)), approximate="tanh"))
        return self.ln(x) @ self.tok.weight.t()


class RnnTagger(nn.Module):
    """A sequence tagger: embeddings, a 2-layer bidirectional LSTM or GRU, a linear head."""

    def __init__(self, cell, vocab=800, d=48, hidden=64, tags=9):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(d, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, input_ids):
        y, _ = self.rnn(self.emb(input_ids))
        return F.log_softmax(self.head(y), dim=-1)


class LoopScorer(nn.Module):
    """A gated recurrent scorer written as a Python loop over time steps; scripted
    (torch.jit.script), it exports as an ONNX Loop whose trip count is the sequence length."""

    def __init__(self, d=32, hidden=48):
        super().__init__()
        self.hidden = hidden
        self.wx = nn.Linear(d, 2 * hidden)
        self.wh = nn.Linear(hidden, 2 * hidden)
        self.out = nn.Linear(hidden, 4)

    def forward(self, x):
        h = torch.zeros(x.shape[0], self.hidden, dtype=x.dtype)
        acc = torch.zeros(x.shape[0], self.hidden, dtype=x.dtype)
        for t in range(x.shape[1]):
            z, c = (self.wx(x[:, t]) + self.wh(h)).chunk(2, dim=1)
            g = torch.sigmoid(z)
            h = g * h + (1 - g) * torch.tanh(c)
            acc = acc + torch.tanh(h)
        return self.out(acc / x.shape[1]), h


class TextDecoder(nn.Module):
    """nn.TransformerDecoder (2 layers) over token embeddings with a causal target mask and
    a memory key padding mask, a vocabulary head: a seq2seq decoder with free batch, target
    and memory lengths."""

    def __init__(self, vocab=500, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerDecoderLayer(d, 4, 128, dropout=0.0, batch_first=True, activation=lambda x: F.gelu(x))
        self.dec = nn.TransformerDecoder(layer, 2)
        self.head = nn.Linear(d, vocab)

    def forward(self, tgt_ids, memory, memory_mask):
        t = tgt_ids.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        y = self.dec(self.emb(tgt_ids), memory, tgt_mask=causal, memory_key_padding_mask=memory_mask == 0)
        return self.head(y)


class RnnStack(nn.Module):
    """A 2-layer bidirectional LSTM fed its initial h0/c0 (sequence-first), then a 3-layer GRU."""

    def __init__(self, d=24, h=32):
        super().__init__()
        self.lstm = nn.LSTM(d, h, num_layers=2, bidirectional=True)
        self.gru = nn.GRU(2 * h, h, num_layers=3)
        self.out = nn.Linear(h, 5)

    def forward(self, x, h0, c0):
        y, (hn, cn) = self.lstm(x, (h0, c0))
        z, gn = self.gru(y)
        return self.out(z), hn, cn, gn


class InterpolateScales(nn.Module):
    """F.interpolate by scale factors over a free height and width: bilinear with
    align_corners=True by 1.5 and 0.75 (torch and ONNX Runtime divide by the integer output
    length), nearest by 1.5 and 0.75, bilinear by 0.3."""

    def forward(self, x):
        return (F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                F.interpolate(x, scale_factor=0.75, mode="bilinear", align_corners=True),
                F.interpolate(x, scale_factor=1.5, mode="nearest"),
                F.interpolate(x, scale_factor=0.75, mode="nearest"),
                F.interpolate(x, scale_factor=0.3, mode="bilinear", align_corners=False))


class PaddedAttention(nn.Module):
    """nn.MultiheadAttention with a key padding mask that masks batch row 0 entirely (a fully
    padded sequence): softmax over all -inf is NaN in torch and ONNX Runtime."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x, mask):
        m = mask.clone()
        m[0] = 0
        y, w = self.mha(x, x, x, key_padding_mask=m == 0, need_weights=True)
        return y, w


class SegmentationOut(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class PrenormEncoder(nn.Module):
    """nn.TransformerEncoder with norm_first=True and ReLU feed-forward (3 layers, d 128,
    4 heads) over token embeddings, then a linear head: the pre-norm block order."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="relu")
        self.enc = nn.TransformerEncoder(layer, 3)
        self.head = nn.Linear(128, 10)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)))


class ConformerBlock(nn.Module):
    """One Conformer block (d 96, 4 heads): half-step SiLU feed-forward, self-attention, the
    convolution module (pointwise conv, GLU, depthwise Conv1d k=15, BatchNorm1d, SiLU, pointwise
    conv), a second half-step feed-forward, LayerNorm."""

    def __init__(self, d=96, heads=4, k=15):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.ln_att = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln_conv = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.ln_out = nn.LayerNorm(d)

    def forward(self, x):
        x = x + 0.5 * self.ff1(x)
        h = self.ln_att(x)
        x = x + self.att(h, h, h, need_weights=False)[0]
        c = self.ln_conv(x).transpose(1, 2)
        c = F.glu(self.pw1(c), dim=1)
        c = self.pw2(F.silu(self.bn(self.dw(c))))
        x = x + c.transpose(1, 2)
        x = x + 0.5 * self.ff2(x)
        return self.ln_out(x)


class Conformer(nn.Module):
    """A small Conformer speech encoder over [batch, frames, 80] filterbanks: Conv2d subsampling
    by 4 (two stride-2 3x3 convs), a linear projection, 2 Conformer blocks, log-softmax over 64
    tokens."""

    def __init__(self):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, 32, 3, 2), nn.ReLU(), nn.Conv2d(32, 32, 3, 2), nn.ReLU())
        self.proj = nn.Linear(32 * 19, 96)
        self.blocks = nn.Sequential(ConformerBlock(), ConformerBlock())
        self.head = nn.Linear(96, 64)

    def forward(self, feats):
        y = self.sub(feats.unsqueeze(1))  # [b, 32, frames', 19]
        b, c, t, f = y.shape
        y = self.proj(y.permute(0, 2, 1, 3).reshape(b, t, c * f))
        return torch.log_softmax(self.head(self.blocks(y)), -1)


def _deeplabv3_mbv3():
    import torchvision
    return SegmentationOut(torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=5, aux_loss=False))


def _torchvision(name, **kwargs):
    import torchvision
    return getattr(torchvision.models, name)(weights=None, **kwargs)


def _vit_small():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                             num_classes=10)


def _swin_small():
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10)


class DetectionOut(nn.Module):
    """A torchvision detector over a batch of one image [1, 3, H, W] in [0, 1]: its boxes,
    scores and labels (the postprocess, NMS included, is in the graph)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, images):
        d = self.m([images[0]])[0]
        return d["boxes"], d["scores"], d["labels"]


def _detector(name, **kwargs):
    # Random weights score every class near 1/classes: the score thresholds are lowered so
    # that boxes come out of the NMS and the comparison has something to compare.
    import torchvision
    return DetectionOut(getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **kwargs))


def conv_bn_silu(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class YoloLite(nn.Module):
    """A small YOLO-style detector over [1, 3, H, W] images in [0, 1]: a Conv-BN-SiLU backbone
    with CSP-like blocks (Split/Concat), an FPN neck with nearest upsampling and Concat, an
    anchor-free head at strides 8, 16 and 32 decoded on a grid, and the postprocess in the
    graph: class scores times objectness, TopK candidates, a score filter, and
    torchvision.ops.batched_nms (NonMaxSuppression over class-offset boxes)."""

    def __init__(self, classes=20, w=16, conf=0.02, iou=0.45, max_det=100):
        super().__init__()
        self.classes, self.conf, self.iou, self.max_det = classes, conf, iou, max_det
        self.stem = nn.Sequential(conv_bn_silu(3, w, 3, 2), conv_bn_silu(w, 2 * w, 3, 2))      # /4
        self.c3 = nn.Sequential(conv_bn_silu(2 * w, 4 * w, 3, 2), conv_bn_silu(4 * w, 4 * w))   # /8
        self.c4 = nn.Sequential(conv_bn_silu(4 * w, 8 * w, 3, 2), conv_bn_silu(8 * w, 8 * w))   # /16
        self.c5 = nn.Sequential(conv_bn_silu(8 * w, 16 * w, 3, 2), conv_bn_silu(16 * w, 16 * w, 1))  # /32
        self.lat5 = conv_bn_silu(16 * w, 8 * w, 1)
        self.p4 = conv_bn_silu(16 * w, 8 * w)
        self.lat4 = conv_bn_silu(8 * w, 4 * w, 1)
        self.p3 = conv_bn_silu(8 * w, 4 * w)
        self.heads = nn.ModuleList(nn.Conv2d(c, 5 + classes, 1) for c in (4 * w, 8 * w, 16 * w))

    def forward(self, x):
        import torchvision
        c3 = self.c3(self.stem(x))
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        l5 = self.lat5(c5)
        p4 = self.p4(torch.cat([F.interpolate(l5, scale_factor=2.0, mode="nearest"), c4], 1))
        l4 = self.lat4(p4)
        p3 = self.p3(torch.cat([F.interpolate(l4, scale_factor=2.0, mode="nearest"), c3], 1))
        preds = []
        for f, head, stride in zip((p3, p4, c5), self.heads, (8, 16, 32)):
            y = head(f)
            b, _, h, w = y.shape
            y = y.permute(0, 2, 3, 1).reshape(b, h * w, 5 + self.classes)
            gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                    indexing="ij")
            grid = torch.stack([gx, gy], -1).reshape(1, h * w, 2)
            xy = (y[..., :2].sigmoid() * 2 - 0.5 + grid) * stride
            wh = torch.exp(y[..., 2:4].clamp(max=4.0)) * stride
            preds.append(torch.cat([xy - wh / 2, xy + wh / 2, y[..., 4:].sigmoid()], -1))
        p = torch.cat(preds, 1)[0]                       # [anchors, 4 + 1 + classes]
        scores, labels = (p[:, 5:] * p[:, 4:5]).max(1)
        scores, order = scores.topk(min(1000, p.shape[0]))
        boxes, labels = p[order, :4], labels[order]
        keep = scores > self.conf
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        keep = torchvision.ops.batched_nms(boxes, scores, labels, self.iou)[: self.max_det]
        return boxes[keep], scores[keep], labels[keep]


BUILDERS = {
    "resnet18": lambda: _torchvision("resnet18"),
    "mobilenet_v3_small": lambda: _torchvision("mobilenet_v3_small"),
    "efficientnet_b0": lambda: _torchvision("efficientnet_b0"),
    "regnet_y_400mf": lambda: _torchvision("regnet_y_400mf"),
    "squeezenet1_1": lambda: _torchvision("squeezenet1_1"),
    "vit_b_16": lambda: _torchvision("vit_b_16"),
    "swin_t": lambda: _torchvision("swin_t"),
    "vit_small": _vit_small,
    "swin_small": _swin_small,
    "bert_encoder": BertEncoder,
    "gpt_decoder_triu": lambda: GptDecoder(triu=True),
    "gpt_decoder_arange": lambda: GptDecoder(triu=False),
    "lstm_tagger": lambda: RnnTagger("lstm"),
    "gru_tagger": lambda: RnnTagger("gru"),
    "loop_scorer": LoopScorer,
    "text_decoder": TextDecoder,
    "rnn_stack": RnnStack,
    "interpolate_scales": InterpolateScales,
    "padded_attention": PaddedAttention,
    "deeplabv3_mbv3": _deeplabv3_mbv3,
    "mnasnet0_5": lambda: _torchvision("mnasnet0_5"),
    "shufflenet_v2_x1_0": lambda: _torchvision("shufflenet_v2_x1_0"),
    "prenorm_encoder": PrenormEncoder,
    "conformer": Conformer,
    "yolo_lite": YoloLite,
    "ssdlite320_mobilenet_v3_large": lambda: _detector("ssdlite320_mobilenet_v3_large"),
    "fasterrcnn_mobilenet_v3_large_320_fpn": lambda: _detector("fasterrcnn_mobilenet_v3_large_320_fpn",
                                                               box_score_thresh=0.001),
    "retinanet_resnet50_fpn": lambda: _detector("retinanet_resnet50_fpn", score_thresh=0.005),
}
SCRIPTED = {"loop_scorer"}   # exported from torch.jit.script, so control flow stays (Loop)


def calibrate_batchnorm(module, example, seed):
    """Sets every BatchNorm's running statistics to those of a random batch shaped
    like EXAMPLE. With torchvision's initial statistics (mean 0, var 1) a random
    MobileNetV3 or EfficientNet shrinks its activations layer after layer to
    logits of 1e-9..1e-14: comparisons on them would test noise."""
    if isinstance(module, DetectionOut):
        module = module.m.backbone   # a detector's forward in train mode wants targets
    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns or not torch.is_floating_point(torch.from_numpy(example)):
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None   # a cumulative average: one batch gives its exact statistics
    g = torch.Generator().manual_seed(seed + 1)
    batch = torch.randn((8,) + tuple(example.shape[1:]), generator=g)
    module.train()
    with torch.no_grad():
        module(batch)
    module.eval()


def export(recipe, example_inputs, path, seed=0):
    """Exports recipe {"model", "opset", "input_names", "output_names", "dynamic_axes"}
    with EXAMPLE_INPUTS (numpy arrays, in input order) to PATH."""
    name = recipe["model"]
    if name not in BUILDERS:
        raise KeyError(f"unknown torch recipe '{name}' (known: {', '.join(sorted(BUILDERS))})")
    torch.manual_seed(seed)
    module = BUILDERS[name]().eval()
    with torch.no_grad():
        for p in module.parameters():
            # torchvision zero-initializes some heads (ViT's): zero logits compare equal
            # to anything, so give every all-zero weight matrix random values.
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02)
    calibrate_batchnorm(module, example_inputs[0], seed)
    if name in SCRIPTED:
        module = torch.jit.script(module)
    args = tuple(torch.from_numpy(x) for x in example_inputs)
    dynamic_axes = {k: {int(a): n for a, n in v.items()} for k, v in recipe.get("dynamic_axes", {}).items()}
    # Not under torch.no_grad(): without gradients torch takes its fused attention
    # fast path (aten::_native_multi_head_attention), which has no ONNX export.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, opset_version=recipe["opset"], input_names=recipe["input_names"],
                          output_names=recipe["output_names"], dynamic_axes=dynamic_axes, do_constant_folding=True)
