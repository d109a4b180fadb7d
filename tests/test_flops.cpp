// FLOP counts of VitConfig (what --dry-run prints as gflops_per_image) against a count by hand, layer by layer, for a
// small model: backbone and the position encoding's share (rotation of q and k, the absolute table's add).
#include <catch2/catch.hpp>
#include <liere/nn/vit.hpp>

using liere::PEKind;

namespace {

// 8×8 RGB images, patch 4: N = 4 patches, T = 5 tokens with CLS; dim 16, 2 heads of D = 8, depth 2, MLP 32, 5 classes.
liere::nn::VitConfig small(PEKind kind, int block = 4) {
  liere::nn::VitConfig c;
  c.image = {8, 8};
  c.channels = 3;
  c.patch = 4;
  c.dim = 16, c.depth = 2, c.heads = 2, c.mlp_hidden = 32, c.classes = 5;
  c.pe.kind = kind;
  c.pe.block = block;
  c.validate();
  return c;
}

// Multiply-adds by hand (FLOPs are twice these).
constexpr double kPatchMacs = 4 * (3 * 4 * 4) * 16;  // N × (C·p·p) × dim = 3072
constexpr double kLayerMacs = 5 * 16 * 48             // qkv: T × dim × 3·dim
                              + 2 * 5 * 5 * 8         // Q Kᵀ per head: H × T × T × D
                              + 2 * 5 * 5 * 8         // P V
                              + 5 * 16 * 16           // proj
                              + 5 * 16 * 32 + 5 * 32 * 16;  // fc1, fc2
constexpr double kHeadMacs = 16 * 5;

}  // namespace

TEST_CASE("FLOPs: the backbone of a small ViT counted by hand", "[flops]") {
  const auto c = small(PEKind::none);
  CHECK(kLayerMacs == 11040);
  CHECK(c.backbone_gflops_per_image() * 1e9 == Approx(2 * (kPatchMacs + 2 * kLayerMacs + kHeadMacs)));
  CHECK(c.pe_gflops_per_image() == 0.0);
  CHECK(c.gflops_per_image() == c.backbone_gflops_per_image());
}

TEST_CASE("FLOPs: the encoding's share per image counted by hand", "[flops]") {
  const double backbone = 2 * (kPatchMacs + 2 * kLayerMacs + kHeadMacs);
  SECTION("LieRE block 4: q and k of 5 tokens (CLS rotated by the identity), 2 heads, 2 layers") {
    const auto c = small(PEKind::liere, 4);
    // per (layer, head, token): two vectors, each D/b = 2 blocks of 4×4 multiply-adds = 32
    const double macs = 2 * 2 * 5 * 2 * (2 * 4 * 4);
    CHECK(c.pe_gflops_per_image() * 1e9 == Approx(2 * macs));
    CHECK(c.gflops_per_image() * 1e9 == Approx(backbone + 2 * macs));
  }
  SECTION("LieRE block 8 with --cls skip: 4 rotated tokens") {
    auto c = small(PEKind::liere, 8);
    c.pe.cls = liere::ClsPolicy::skip;
    CHECK(c.pe_gflops_per_image() * 1e9 == Approx(2 * (2 * 2 * 4 * 2 * (8 * 8))));
  }
  SECTION("RoPE-Mixed: 2×2 blocks whatever --block says") {
    const auto c = small(PEKind::rope_mixed, 8);
    CHECK(c.pe_gflops_per_image() * 1e9 == Approx(2 * (2 * 2 * 5 * 2 * (4 * 2 * 2))));
  }
  SECTION("STRING: the dense transform of every token, then 2×2 blocks") {
    const auto c = small(PEKind::string_cayley);
    CHECK(c.pe_gflops_per_image() * 1e9 == Approx(2 * (2 * 2 * 5 * 2 * (8 * 8 + 4 * 2 * 2))));
  }
  SECTION("absolute: the table added to 5 tokens of 16") {
    const auto c = small(PEKind::absolute);
    CHECK(c.pe_gflops_per_image() * 1e9 == Approx(5 * 16));
  }
  SECTION("a larger block costs more, the backbone does not change") {
    CHECK(small(PEKind::liere, 8).pe_gflops_per_image() == Approx(2 * small(PEKind::liere, 4).pe_gflops_per_image()));
    CHECK(small(PEKind::liere, 8).backbone_gflops_per_image() == small(PEKind::absolute).backbone_gflops_per_image());
  }
}
