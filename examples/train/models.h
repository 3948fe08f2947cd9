// The two example models, shared by train_digits.cc, train_transformer.cc and
// bench/train_bench.cc.
#pragma once
#include <hodu/hodu.h>

#include <memory>

namespace examples {

namespace nn = hodu::nn;
using hodu::Tensor;

// conv(1→16) BN ReLU → conv(16→32) ReLU → maxpool 2 → dropout → fc 512→64 ReLU → fc 64→10
struct DigitsNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> fc1, fc2;
  DigitsNet() : Module("DigitsNet") {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 16, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(16, 32, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(32 * 4 * 4, 64));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = bn1->forward(conv1->forward(x)).relu();
    h = hodu::max_pool2d(conv2->forward(h).relu(), {2, 2});
    h = drop->forward(h.flatten(1));
    return fc2->forward(fc1->forward(h).relu());
  }
};

constexpr int64_t kVocab = 10, kLength = 12, kDim = 32, kHeads = 4;

// Post-norm encoder block: x = LN(x + attn(x)); x = LN(x + FFN(x)).
struct Block : nn::Module {
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::Linear> ff1, ff2;
  Block() : Module("Block") {
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(kDim, kHeads, 0.0, true, true));
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(hodu::Dims{kDim}));
    ff1 = register_module("ff1", std::make_shared<nn::Linear>(kDim, 4 * kDim));
    ff2 = register_module("ff2", std::make_shared<nn::Linear>(4 * kDim, kDim));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(hodu::Dims{kDim}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ln1->forward(x + attn->forward(x));
    return ln2->forward(h + ff2->forward(hodu::gelu(ff1->forward(h))));
  }
};

struct Reverser : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  Tensor position;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::Linear> head;
  Reverser() : Module("Reverser") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(kVocab, kDim));
    position = register_parameter("position", hodu::randn({kLength, kDim}) * 0.1);
    blocks = register_module("blocks", std::make_shared<nn::Sequential>(Block(), Block()));
    head = register_module("head", std::make_shared<nn::Linear>(kDim, kVocab));
  }
  // tokens [N, 12] (i64) -> logits [N, 12, 10]
  Tensor forward(const Tensor& tokens) override {
    return head->forward(blocks->forward(embed->forward(tokens) + position));
  }
};

}  // namespace examples
