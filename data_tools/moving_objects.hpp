// data_tools/moving_objects.hpp — the passing task: a synthetic spatio-temporal classification task whose label is a
// relation between positions in space and time, generated on a CPU in microseconds per clip with no download.
//
// C channels (3, R G B), T frames, S the side of the square frames; a clip is (C, T, S, S) bytes.
//
// The scene. A white square, the anchor, stands still. K coloured squares, the movers (red, green, blue; K = 1, 2, 3
// for 2, 4, 8 classes), each cross the frame in a straight line at constant speed, passing the anchor. Optional
// distractors (grey, yellow, cyan or magenta squares, each static or moving in a straight line) are drawn first,
// independent of everything else. The background is black, optionally with uniform noise. Every square has side
// 0.09375·S (3 pixels at S = 32) and is drawn anti-aliased at its sub-pixel position (exact area coverage).
//
// The label. Mover k passes the anchor either on its left or on its right: as the frames play on screen (x to the
// right, y down), the anchor lies to the left or to the right of the mover's direction of travel; "Right" means the
// mover goes round the anchor clockwise. With bit_k = 1 for Right, label = Σ_k bit_k · 2^(K−1−k) (mover 0, red, is
// the most significant bit), so with K = 2: 0 RedLeftGreenLeft, 1 RedLeftGreenRight, 2 RedRightGreenLeft,
// 3 RedRightGreenRight. In numbers: bit_k = 1 iff cross(v_k, A − M_k(t)) = v_x·(A−M)_y − v_y·(A−M)_x > 0, which
// is the same for every t on a straight line.
//
// How a scene is drawn (all lengths in units of S; sample i from its own generator, see make_passing_scene):
//   label = i mod C, so any C consecutive samples hold every class once (balanced);
//   anchor A uniform in [0.25, 0.75]² · S: the whole scene moves with it, so absolute positions carry no label;
//   mover k: direction θ_k uniform in [0, 2π), pass distance D_k ~ U[0.14, 0.22], travel over the clip
//   L_k ~ U[0.30, 0.40] (speed L_k / (T−1) per frame), time of closest approach t*_k ~ U[0.3, 0.7] · (T−1), and
//     M_k(t) = A + σ_k D_k n_k + (t − t*_k) (L_k / (T−1)) u_k,  u_k = (cos θ_k, sin θ_k), n_k = (−sin θ_k, cos θ_k),
//   with σ_k = −1 for Right and +1 for Left (cross(u, A − M) = −σ D);
//   distractor j: the centre of its path uniform in [0, 1]² · S, static with probability ½, else a random direction
//   and a speed drawn like a mover's.
// About 0.4% of mover positions (in 6% of the clips at K = 2, mostly a single frame) fall outside the frame.
//
// Why no single frame can answer. In frame t, mover k sits at A + r_k(t) with r_k(t) = R(θ_k)·(τ v, σ_k D),
// τ = t − t*_k: for any fixed (τ, v, D) and θ_k uniform, r_k(t) is uniform on the circle of radius √(D² + τ²v²)
// whatever σ_k is. The movers, the anchor and the distractors are independent, so the whole configuration of frame
// t — hence the frame itself, its pixels being a function of the configuration — has the same distribution in every
// class: a classifier that sees any one frame, even knowing t, is at chance, 1/C. All objects look the same in every
// class (same colours, sizes, speeds), so per-frame appearance carries nothing either. The label needs the
// direction of travel (the order of at least two frames) together with where the anchor is relative to the path.
//
// Symmetries (tested): translating the scene keeps the label; rotating it keeps the label; playing the frames
// backwards or mirroring the frames flips every bit (label → C − 1 − label). Without any temporal order (frames
// as a set) only the XOR of the bits is visible, not the bits: such a model is capped at 2/C for C ≥ 4 (1/2 at C = 2).
// A patch embedding over tubelets of ≥ 2 frames sees each mover's local motion, so with such tubelets the task tests
// the spatial relation between a moving token and the anchor across time; with 1-frame tubelets the temporal
// order must come from the position encoding as well.
//
// Default geometry: 8 frames of 32×32 (tubelets 2×8×8 → a 4×4×4 grid of 64 tokens), 4 classes, 2 distractors.
#pragma once

#include <data_tools/video.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace liere::data {

struct PassingTaskConfig {
  int frames = 8;            // T, 2 … 1024
  int size = 32;             // S, 16 … 1024
  int num_classes = 4;       // C = 2, 4 or 8 (K = 1, 2, 3 movers)
  int distractors = 2;       // 0 … 16
  double noise = 0;          // uniform background noise in [0, noise] grey levels, 0 … 64
  std::uint64_t seed = 0;    // data-set seed: sample i is the same for the same (config, seed, i)
};

// Checks every field; errors name the field, its value and the allowed range.
void check_passing_config(const PassingTaskConfig& config);

int passing_movers(int num_classes);                                   // K = log2 C
std::vector<std::string> passing_class_names(int num_classes);         // "RedLeftGreenLeft", … (C names)

struct PassingObject {
  double x0 = 0, y0 = 0;  // centre in frame 0, pixels (x right, y down; pixel (x, y) covers [x, x+1) × [y, y+1))
  double vx = 0, vy = 0;  // pixels per frame
  std::array<std::uint8_t, 3> colour{};  // R, G, B

  double x(double t) const { return x0 + vx * t; }
  double y(double t) const { return y0 + vy * t; }
};

struct PassingScene {
  int label = 0;
  double object_size = 3;               // side of every square, pixels
  PassingObject anchor;                 // vx = vy = 0
  std::vector<PassingObject> movers;    // (K)
  std::vector<PassingObject> distractors;
  std::uint64_t noise_seed = 0;
};

// Scene i of the data set (the recipe above). Its generator is std::mt19937_64 seeded with
// mix_seed(config.seed, kPassingStream, i); draws in the order anchor (x, y); for each mover θ, D, L, t*; for each
// distractor x, y, static-or-not, θ, speed, colour; then the noise seed.
inline constexpr std::uint64_t kPassingStream = 0x7061737369ull;  // "passi"
PassingScene make_passing_scene(const PassingTaskConfig& config, std::uint64_t index);

// The label the geometry of `scene` gives (the rule above); make_passing_scene's label agrees with it.
int passing_label(const PassingScene& scene);

// The scene drawn into clip, (3, T, S, S): every byte written.
void render_passing_scene(const PassingTaskConfig& config, const PassingScene& scene, std::uint8_t* clip);

// Sample i: its clip (3, T, S, S) and, returned, its label.
int make_passing_clip(const PassingTaskConfig& config, std::uint64_t index, std::uint8_t* clip);

// Samples first … first+count−1 on OpenMP threads (the result does not depend on their number).
//   clips: (count, 3, T, S, S); labels: (count).
void make_passing_batch(const PassingTaskConfig& config, std::uint64_t first, int count, std::uint8_t* clips,
                        int* labels);

// Writes the task in the UCF101 layout, so that the UCF101 reader (and its trainer) run on it end to end:
//   root/UCF-101/<Class>/v_<Class>_i<NNNNNN>.avi   one clip per sample (NNNNNN its index),
//   root/ucfTrainTestlist/classInd.txt, trainlist01.txt, testlist01.txt   (CRLF, as the official lists),
//   root/passing_task.txt   the configuration, for people.
// Samples 0 … n_train−1 form the training list and n_train … n_train+n_test−1 the test list (disjoint, balanced
// when n_train and n_test are multiples of C). Each file is written under a temporary name and renamed. Clips are
// encoded on OpenMP threads. Returns the number of clip files written.
int write_passing_ucf101(const PassingTaskConfig& config, const std::string& root, int n_train, int n_test,
                         const VideoWriteOptions& video = {});

}  // namespace liere::data
