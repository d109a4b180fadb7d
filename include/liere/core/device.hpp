// liere/core/device.hpp — where a tensor's memory lives and where an op runs.
//
// Every tensor carries a Device; every engine op dispatches once on it (backend/dispatch.hpp) to the function
// of the same name and signature in backend/cpu/ or backend/cuda/. An op without a kernel on a device, or a
// device this build has no backend for, stops with a liere::Error that names both.
#pragma once

#include <liere/core/config.hpp>
#include <memory>
#include <string>

namespace liere {

enum class Device { cpu, cuda };

inline const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// "cpu" or "cuda" (as on the trainers' command lines).
inline Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda") return Device::cuda;
  LIERE_ENSURE(false, "unknown device '" << s << "'; allowed: cpu, cuda");
  return Device::cpu;
}

// What a backend's forward of an op may keep for the same op's backward, opaque to the engine: the tape's closure
// holds it between the two passes (a bf16 run's linear layer keeps its operands rounded once; the CPU keeps
// nothing). Empty when nothing was kept.
using OpState = std::shared_ptr<void>;

}  // namespace liere
