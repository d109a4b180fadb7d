// bench/bench_flops.cpp — the forward FLOPs per image of ViT-Tiny/Base/Large with each position encoding, from
// VitConfig (what --dry-run prints as gflops_per_image), beside the paper's Table 8, as a markdown table
// (docs/flops.md). No timing: a count.
//
//   bench_flops [--help]
//
// Two inputs: 224 px with patch 16 (196 patches + CLS) and 32 px with patch 4 (64 patches + CLS, the CIFAR setting
// of the paper's experiments). The paper's Table 8 counts multiply-adds (fvcore's convention); liere counts
// 2 FLOPs per multiply-add, so the table shows liere's count divided by 2 next to the paper's.
#include <app/flags.hpp>
#include <cstdio>
#include <liere/nn/vit.hpp>
#include <string>
#include <vector>

namespace {

struct Size {
  const char* name;
  int dim, depth, heads, mlp;
  double paper[5];  // Table 8: abs, VisionLlama, RoPE-Mixed, LieRE8, LieRE64 (G, multiply-adds)
};

struct Enc {
  const char* name;
  liere::PEKind kind;
  int block;
};

const std::vector<Size> kSizes = {
    {"ViT-Tiny", 192, 12, 3, 768, {0.963, 0.963, 0.964, 0.968, 0.970}},
    {"ViT-Base", 768, 12, 12, 3072, {5.607, 5.607, 5.609, 5.617, 5.684}},
    {"ViT-Large", 1024, 24, 16, 4096, {19.856, 19.856, 19.863, 19.882, 20.061}},
};
const std::vector<Enc> kEncodings = {{"abs", liere::PEKind::absolute, 0},
                                     {"VisionLlama", liere::PEKind::visionllama, 2},
                                     {"RoPE-Mixed", liere::PEKind::rope_mixed, 2},
                                     {"LieRE8", liere::PEKind::liere, 8},
                                     {"LieRE64", liere::PEKind::liere, 64}};

// The table of one input size: every model with every encoding.
void print_table(int px) {
  const int patch = px == 224 ? 16 : 4;
  std::printf("\n### %d px, patch %d (%d tokens), CLS pooling, 1000 classes at 224 px and 100 at 32 px\n\n", px, patch,
              (px / patch) * (px / patch) + 1);
  std::printf(
      "| model | encoding | GFLOPs (liere) | encoding GFLOPs | %% over abs | G multiply-adds (liere / 2) | "
      "paper Table 8 | paper %% over abs |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Size& s : kSizes) {
    double abs_total = 0;
    for (std::size_t e = 0; e < kEncodings.size(); ++e) {
      liere::nn::VitConfig c;
      c.image = {px, px};
      c.patch = patch;
      c.dim = s.dim, c.depth = s.depth, c.heads = s.heads, c.mlp_hidden = s.mlp;
      c.classes = px == 224 ? 1000 : 100;
      c.pe.kind = kEncodings[e].kind;
      if (kEncodings[e].block) c.pe.block = kEncodings[e].block;
      c.validate();
      const double g = c.gflops_per_image();
      if (e == 0) abs_total = g;
      std::printf("| %s | %s | %.4f | %.5f | %+.3f%% | %.4f | %.3f | %+.3f%% |\n", s.name, kEncodings[e].name, g,
                  c.pe_gflops_per_image(), 100 * (g / abs_total - 1), g / 2, s.paper[e],
                  100 * (s.paper[e] / s.paper[0] - 1));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_flops", [&] {
    liere::app::Flags f("bench_flops",
                        "Prints the forward FLOPs per image of ViT-Tiny/Base/Large at 224 px (patch 16) and 32 px\n"
                        "(patch 4) for each position encoding, beside the paper's Table 8 (markdown).");
    if (!f.parse(argc, argv)) return 0;
    for (int px : {224, 32}) print_table(px);
    return 0;
  });
}
