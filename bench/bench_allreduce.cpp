// bench_allreduce — the gradient all-reduce of data-parallel training alone (docs/scaling.md): times the sum of
// n floats over the ranks through app::Comm (MPI_Iallreduce polled to completion, as the trainer's buckets are),
// whole and in buckets, and prints the time and the bus bandwidth 2(N−1)/N · bytes / time (nccl-tests' busbw).
//
//   mpirun -np 2 ./build/bench/bench_allreduce                 # 5 366 410 floats: ViT-Tiny's gradient
//   mpirun -np 2 ./build/bench/bench_allreduce --floats 85166602 --bucket-mib 25
#include <app/comm.hpp>
#include <app/flags.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iomanip>
#include <iostream>
#include <vector>

using namespace liere;

int main(int argc, char** argv) {
  app::Comm& comm = app::Comm::init(&argc, &argv);
  return app::run_main("bench_allreduce", [&] {
    std::int64_t floats = 5366410;
    double bucket_mib = 4;
    int reps = 10;
    app::Flags f("bench_allreduce", "Times the float sum over the ranks (mpirun -np N) of a gradient of --floats values.");
    f.add("floats", &floats, "floats reduced (default: ViT-Tiny's 5 366 410 parameters)");
    f.add("bucket-mib", &bucket_mib, "bucket size of the second measurement, MiB");
    f.add("reps", &reps, "repetitions");
    if (!f.parse(argc, argv)) return 0;
    LIERE_ENSURE(floats >= 1 && bucket_mib > 0 && reps >= 1, "--floats, --bucket-mib and --reps must be positive");
    std::vector<float> x(static_cast<std::size_t>(floats), 1e-3f);
    const std::size_t bucket = std::max<std::size_t>(1, std::size_t(bucket_mib * 1024 * 1024 / 4));
    auto whole = [&] {
      const auto r = comm.start_all_reduce_sum(x.data(), x.size());
      comm.wait(r, "the benchmark");
    };
    auto bucketed = [&] {  // every bucket started, then all waited for (as GradReducer::finish)
      std::vector<app::Comm::Request> rs;
      for (std::size_t o = 0; o < x.size(); o += bucket)
        rs.push_back(comm.start_all_reduce_sum(x.data() + o, std::min(bucket, x.size() - o)));
      for (auto r : rs) comm.wait(r, "the benchmark");
    };
    auto time = [&](auto&& op) {
      op();
      comm.barrier("the benchmark");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) op();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    };
    const double bytes = double(floats) * 4, n = comm.size();
    for (int k = 0; k < 2; ++k) {
      const double s = time(k == 0 ? std::function<void()>(whole) : std::function<void()>(bucketed));
      std::cout << "ranks=" << comm.size() << " mb=" << std::fixed << std::setprecision(2) << bytes / 1e6
                << (k == 0 ? " whole" : " buckets_mib=");
      if (k) std::cout << std::setprecision(1) << bucket_mib;
      std::cout
                << " allreduce_ms=" << std::setprecision(2) << 1e3 * s << " busbw_gb_per_s="
                << (n > 1 ? 2 * (n - 1) / n * bytes / s / 1e9 : 0.0) << "\n";
    }
    return 0;
  });
}
