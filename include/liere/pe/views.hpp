// liere/pe/views.hpp — what a position encoding hands to attention for one layer: per head, a rotation table
// view and an optional dense transform; and where attention's backward accumulates their gradients. Views
// only (the encoding owns the memory), so the same structs serve host and device buffers.
#pragma once

#include <algorithm>
#include <liere/pe/rotation_table.hpp>
#include <vector>

namespace liere {

// What attention applies to the q and k of one head.
template <class Scalar>
struct HeadRotation {
  RotationTableView<const Scalar> table;  // T − first_rotated rows (shared by the batch) or B·(T − first_rotated)
  const Scalar* transform = nullptr;      // optional D×D, row-major, applied first (before the table)
};

template <class Scalar>
struct HeadRotationGrad {
  RotationTableView<Scalar> dtable;  // accumulates dL/dtable
  Scalar* dtransform = nullptr;      // accumulates dL/dP (D×D row-major)
};

template <class Scalar>
struct AttentionRotations {
  std::vector<HeadRotation<Scalar>> heads;  // size H, or empty: no rotary encoding
  int first_rotated = 0;                    // tokens [0, first_rotated) are not rotated (e.g. a skipped CLS)

  bool any() const { return !heads.empty(); }
  bool any_transform() const {
    return std::any_of(heads.begin(), heads.end(), [](const HeadRotation<Scalar>& h) { return h.transform; });
  }
};

}  // namespace liere
