// examples/app/comm.hpp — the programs' communication layer for data-parallel training (docs/scaling.md): which
// process this is among how many, and the collectives the trainer needs — all-reduce (blocking and non-blocking),
// broadcast, barrier — on MPI (built when CMake finds MPI: LIERE_WITH_MPI). Without MPI, or in a process not
// started by mpirun/srun, there is one process and every collective returns at once, so the programs build and run
// as single processes.
//
// Bounded waits: every collective is started non-blocking and polled (MPI_Test) against a deadline
// (--comm-timeout, default 30 s). A rank that died or stalls leaves the others waiting in a collective; when the
// deadline passes they print which collective waited and for how long and end the job (MPI_Abort), instead of
// hanging until the job's wall limit. (When a process is killed, mpirun itself usually ends the job first.)
//
// Device buffers: the gradient all-reduce of a CUDA model (data_parallel.cpp) runs on NCCL between the GPUs when the
// build found NCCL (LIERE_WITH_NCCL; MPI bootstraps it), else it is staged through pinned host memory to MPI.
//
//   Comm& c = Comm::init(&argc, &argv);   // first thing in main: MPI_Init_thread when started by mpirun
//   if (c.root()) std::cout << ...;       // rank 0 prints and writes files
//   c.all_reduce_sum(stats, 2, "training loss");
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace liere::app {

class Comm {
 public:
  // Initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main thread communicates) when this build has
  // MPI, and returns the process's Comm; later calls return the same. On ranks other than 0, std::cout and
  // std::cerr are silenced (rank 0 prints progress and results); errors still reach stderr, prefixed "[rank r/N]".
  static Comm& init(int* argc, char*** argv);
  // The process's Comm (a single process when init() has not run).
  static Comm& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }
  // This rank's index among the ranks on its machine, and their number (MPI_Comm_split_type, shared memory): which
  // GPU of the machine a rank takes.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // "mpi (Open MPI v4.1.4, …)", or "none (this build has no MPI)".
  std::string describe() const;

  // Seconds a collective may wait for the other ranks before the job is ended (default 30).
  void set_timeout(double seconds);
  double timeout() const { return timeout_; }

  // Sums over the ranks in place; `what` names the collective in a timeout's message.
  void all_reduce_sum(double* x, std::size_t n, const char* what);
  void all_reduce_sum(float* x, std::size_t n, const char* what);
  void all_reduce_sum(std::int64_t* x, std::size_t n, const char* what);
  void all_reduce_max(std::int64_t* x, std::size_t n, const char* what);
  // `bytes` bytes from rank `from` to every rank.
  void broadcast(void* data, std::size_t bytes, int from, const char* what);
  // A string from rank `from` to every rank.
  std::string broadcast(const std::string& s, int from, const char* what);
  // timeout_s < 0: the Comm's timeout; 0: no deadline (e.g. waiting for rank 0 to write a data set).
  void barrier(const char* what, double timeout_s = -1);

  // A non-blocking float sum in place (host memory): start it, poll it, wait for it. The buffer must not be touched
  // until it is done. Handles are small integers, valid until wait() returns.
  using Request = int;
  Request start_all_reduce_sum(float* x, std::size_t n);
  bool test(Request r);  // progresses every pending request; true when r is done
  void wait(Request r, const char* what);
  std::size_t pending() const;

  // Prints "[rank r/N] message" to stderr and ends every process of the job with `code`.
  [[noreturn]] void abort(const std::string& message, int code);

  // MPI_Finalize (also at exit); only on a clean exit of every rank.
  void finalize();

  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

 private:
  Comm() = default;
  // Polls `request` (an MPI_Request held in slots_) until done or the deadline; aborts with a message.
  void wait_slot(int slot, const char* what, double timeout_s);

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool mpi_ = false, finalized_ = false;
  double timeout_ = 30.0;
  struct Slot;
  std::vector<Slot*> slots_;
};

// Stops every rank with a usage error naming the first flag in which some rank's command line differs from rank
// 0's (Flags::canonical, compared by a hash first; Flags::parse calls it in a distributed run). Afterwards usage
// errors count as raised by every rank alike (rank 0 alone prints them).
void check_same_flags(Comm& comm, const std::string& canonical);

// "[rank 1/2] " in a distributed run, else "" (the prefix of this rank's error messages).
std::string rank_prefix();

}  // namespace liere::app
