// examples/app/comm.cpp — MPI behind Comm (comm.hpp); a single process without LIERE_WITH_MPI.
#include <app/comm.hpp>
#include <app/flags.hpp>

#include <liere/core/config.hpp>
#include <liere/core/rng.hpp>

#ifdef LIERE_WITH_MPI
#include <mpi.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <streambuf>
#include <thread>

namespace liere::app {

namespace {
// Where std::cout and std::cerr go on ranks other than 0. Never destroyed: the streams still point at it when
// the runtime flushes them last at exit (std::ios_base::Init's destructor, after this file's statics are gone), so
// a static NullBuffer would be used after its destructor ran (under ASan: a SEGV in std::ostream::flush at exit,
// the -np 2 runs of mpi_data_parallel).
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c == traits_type::eof() ? 0 : c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};
NullBuffer& g_null = *new NullBuffer;
Comm* g_world = nullptr;

#ifdef LIERE_WITH_MPI
// How run_main leaves on an error in a distributed run: an error every rank raised alike (a usage error once the
// ranks are known to share their flags) is printed by rank 0 and the ranks finish normally; any other error is
// printed by the rank that had it, and the job is ended, since the other ranks may be waiting for this one.
int leave_after_error(const std::string& text, int code, bool all_ranks) {
  Comm& c = Comm::world();
  if (!c.distributed()) {
    std::fputs(text.c_str(), stderr);
    return code;
  }
  if (all_ranks) {
    if (c.root()) std::fputs(text.c_str(), stderr);
    c.finalize();
    return code;
  }
  c.abort(text, code);
}
#endif
std::uint64_t text_hash(const std::string& s) {
  std::uint64_t h = 0x1BE2E;
  for (unsigned char c : s) h = hash_u64(h, c);
  return h;
}

// "name=value" lines → the first line that differs between a and b, as "--name A vs B".
std::string first_difference(const std::string& a, const std::string& b, int rank_b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (true) {
    const bool ga = bool(std::getline(sa, la)), gb = bool(std::getline(sb, lb));
    if (!ga && !gb) return "(no line differs)";
    if (ga && gb && la == lb) continue;
    auto name = [](const std::string& l) { return l.substr(0, l.find('=')); };
    auto value = [](const std::string& l) { return l.find('=') == std::string::npos ? l : l.substr(l.find('=') + 1); };
    const std::string n = ga ? name(la) : name(lb);
    std::ostringstream m;
    if (ga && gb && name(la) == name(lb))
      m << "--" << n << " is '" << value(la) << "' on rank 0 and '" << value(lb) << "' on rank " << rank_b;
    else
      m << "rank 0 has '" << (ga ? la : "(nothing)") << "' where rank " << rank_b << " has '" << (gb ? lb : "(nothing)") << "'";
    return m.str();
  }
}
}  // namespace

struct Comm::Slot {
#ifdef LIERE_WITH_MPI
  MPI_Request request = MPI_REQUEST_NULL;
#endif
  bool used = false;
};

std::string rank_prefix() {
  const Comm& c = Comm::world();
  return c.distributed() ? "[rank " + std::to_string(c.rank()) + "/" + std::to_string(c.size()) + "] " : std::string();
}

Comm& Comm::world() {
  if (!g_world) g_world = new Comm();  // a single process; lives until exit
  return *g_world;
}

Comm& Comm::init([[maybe_unused]] int* argc, [[maybe_unused]] char*** argv) {
  Comm& c = world();
#ifdef LIERE_WITH_MPI
  if (c.mpi_) return c;
  // Only under a launcher (mpirun/mpiexec of Open MPI or MPICH, srun with PMI or PMIx): a program started on its
  // own stays a plain single process, without MPI's runtime.
  bool launched = false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    launched = launched || std::getenv(v) != nullptr;
  if (!launched) return c;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fputs("MPI_Init_thread failed\n", stderr);
    std::exit(1);
  }
  c.mpi_ = true;
  // Errors come back as codes (checked below) instead of ending the job inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size_);
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank_, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_rank(local, &c.local_rank_);
    MPI_Comm_size(local, &c.local_size_);
    MPI_Comm_free(&local);
  }
  if (c.distributed()) {
    set_error_exit(leave_after_error);
    set_error_prefix(rank_prefix());
    if (!c.root()) {
      std::cout.rdbuf(&g_null);
      std::cerr.rdbuf(&g_null);
    }
  }
  std::atexit([] {
    if (g_world) g_world->finalize();
  });
#endif
  return c;
}

std::string Comm::describe() const {
#ifdef LIERE_WITH_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, std::size_t(len));
  if (auto nl = v.find_first_of("\n,"); nl != std::string::npos) v.erase(nl);
  return "mpi (" + v + (mpi_ ? "" : ", not initialised") + ")";
#else
  return "none (this build has no MPI)";
#endif
}

void Comm::set_timeout(double seconds) {
  LIERE_ENSURE(seconds > 0, "--comm-timeout " << seconds << ": must be > 0 seconds");
  timeout_ = seconds;
}

Comm::~Comm() {
  for (Slot* s : slots_) delete s;
}

void Comm::finalize() {
#ifdef LIERE_WITH_MPI
  if (mpi_ && !finalized_) {
    finalized_ = true;
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }
#endif
}

void Comm::abort(const std::string& message, int code) {
  std::string text = message;
  if (text.rfind("[rank ", 0) != 0) text = rank_prefix() + text;
  if (text.empty() || text.back() != '\n') text += '\n';
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
#ifdef LIERE_WITH_MPI
  if (mpi_ && !finalized_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

#ifdef LIERE_WITH_MPI
namespace {
void check(int rc, const char* call, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  Comm::world().abort(std::string(call) + " failed during " + what + ": " + std::string(msg, std::size_t(len)), 3);
}
}  // namespace
#endif

void Comm::wait_slot([[maybe_unused]] int slot, [[maybe_unused]] const char* what, [[maybe_unused]] double timeout_s) {
#ifdef LIERE_WITH_MPI
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  MPI_Request& r = slots_[std::size_t(slot)]->request;
  // Poll. Open MPI's non-blocking collectives advance only inside MPI calls, so a large all-reduce (many rounds)
  // needs frequent tests: yield the core between tries (two ranks on two cores share it with the ranks that
  // compute), and sleep only once the wait has lasted a second (then something is wrong anyway).
  for (;;) {
    int done = 0;
    check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test", what);
    if (done) break;
    const double waited = std::chrono::duration<double>(clock::now() - t0).count();
    if (timeout_s > 0 && waited > timeout_s) {
      std::ostringstream m;
      m << "no answer from the other ranks for " << int(waited) << " s in " << what
        << " (--comm-timeout " << timeout_s
        << " s): a rank has died or stalls; ending the job (the last checkpoint, if any, is the last complete one)";
      abort(m.str(), 4);
    }
    if (waited < 1.0) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  slots_[std::size_t(slot)]->used = false;
#endif
}

// One blocking collective: started non-blocking, then waited for with the deadline.
#ifdef LIERE_WITH_MPI
#define LIERE_COMM_BLOCKING(call, what, timeout_s)                 \
  do {                                                             \
    if (!distributed()) return;                                    \
    const Request slot_ = start_all_reduce_sum(nullptr, 0);        \
    check(call, #call, what);                                      \
    wait_slot(slot_, what, timeout_s);                             \
  } while (0)
#endif

void Comm::all_reduce_sum([[maybe_unused]] double* x, [[maybe_unused]] std::size_t n, [[maybe_unused]] const char* what) {
#ifdef LIERE_WITH_MPI
  LIERE_COMM_BLOCKING(MPI_Iallreduce(MPI_IN_PLACE, x, int(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                                     &slots_[std::size_t(slot_)]->request),
                      what, timeout_);
#endif
}
void Comm::all_reduce_sum([[maybe_unused]] float* x, [[maybe_unused]] std::size_t n, [[maybe_unused]] const char* what) {
#ifdef LIERE_WITH_MPI
  LIERE_COMM_BLOCKING(MPI_Iallreduce(MPI_IN_PLACE, x, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                     &slots_[std::size_t(slot_)]->request),
                      what, timeout_);
#endif
}
void Comm::all_reduce_sum([[maybe_unused]] std::int64_t* x, [[maybe_unused]] std::size_t n,
                          [[maybe_unused]] const char* what) {
#ifdef LIERE_WITH_MPI
  LIERE_COMM_BLOCKING(MPI_Iallreduce(MPI_IN_PLACE, x, int(n), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD,
                                     &slots_[std::size_t(slot_)]->request),
                      what, timeout_);
#endif
}
void Comm::all_reduce_max([[maybe_unused]] std::int64_t* x, [[maybe_unused]] std::size_t n,
                          [[maybe_unused]] const char* what) {
#ifdef LIERE_WITH_MPI
  LIERE_COMM_BLOCKING(MPI_Iallreduce(MPI_IN_PLACE, x, int(n), MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD,
                                     &slots_[std::size_t(slot_)]->request),
                      what, timeout_);
#endif
}
void Comm::broadcast([[maybe_unused]] void* data, [[maybe_unused]] std::size_t bytes, [[maybe_unused]] int from,
                     [[maybe_unused]] const char* what) {
#ifdef LIERE_WITH_MPI
  LIERE_ENSURE(bytes <= std::size_t(INT32_MAX), "Comm::broadcast: " << bytes << " bytes is more than one call sends");
  LIERE_COMM_BLOCKING(MPI_Ibcast(data, int(bytes), MPI_BYTE, from, MPI_COMM_WORLD, &slots_[std::size_t(slot_)]->request),
                      what, timeout_);
#endif
}
std::string Comm::broadcast(const std::string& s, int from, const char* what) {
  std::int64_t n = std::int64_t(s.size());
  broadcast(&n, sizeof n, from, what);
  std::string out = rank_ == from ? s : std::string(std::size_t(n), '\0');
  if (n > 0) broadcast(out.data(), std::size_t(n), from, what);
  return out;
}
void Comm::barrier([[maybe_unused]] const char* what, [[maybe_unused]] double timeout_s) {
#ifdef LIERE_WITH_MPI
  LIERE_COMM_BLOCKING(MPI_Ibarrier(MPI_COMM_WORLD, &slots_[std::size_t(slot_)]->request), what,
                      timeout_s < 0 ? timeout_ : timeout_s);
#endif
}

Comm::Request Comm::start_all_reduce_sum([[maybe_unused]] float* x, [[maybe_unused]] std::size_t n) {
  std::size_t k = 0;
  while (k < slots_.size() && slots_[k]->used) ++k;
  if (k == slots_.size()) slots_.push_back(new Slot());
  slots_[k]->used = true;
#ifdef LIERE_WITH_MPI
  slots_[k]->request = MPI_REQUEST_NULL;
  if (x && distributed()) {
    LIERE_ENSURE(n <= std::size_t(INT32_MAX), "Comm: an all-reduce of " << n << " floats is more than one call sends");
    check(MPI_Iallreduce(MPI_IN_PLACE, x, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &slots_[k]->request),
          "MPI_Iallreduce", "the gradient all-reduce");
  }
#endif
  return Request(k);
}

bool Comm::test([[maybe_unused]] Request r) {
#ifdef LIERE_WITH_MPI
  bool done = true;
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    if (!slots_[k]->used) continue;
    int flag = 0;
    check(MPI_Test(&slots_[k]->request, &flag, MPI_STATUS_IGNORE), "MPI_Test", "the gradient all-reduce");
    if (int(k) == r) done = flag != 0;
  }
  return done;
#else
  return true;
#endif
}

void Comm::wait(Request r, const char* what) {
  LIERE_ENSURE(r >= 0 && std::size_t(r) < slots_.size() && slots_[std::size_t(r)]->used, "Comm::wait: no such request " << r);
#ifdef LIERE_WITH_MPI
  wait_slot(r, what, timeout_);
#else
  (void)what;
  slots_[std::size_t(r)]->used = false;
#endif
}

std::size_t Comm::pending() const {
  std::size_t n = 0;
  for (const Slot* s : slots_) n += s->used;
  return n;
}

void check_same_flags(Comm& comm, const std::string& canonical) {
  if (!comm.distributed()) return;
  // Rank 0's hash to every rank; the lowest rank whose hash differs (if any) found by a max over N − rank.
  std::uint64_t h0 = text_hash(canonical);
  comm.broadcast(&h0, sizeof h0, 0, "the comparison of the ranks' flags");
  std::int64_t bad = text_hash(canonical) != h0 ? comm.size() - comm.rank() : 0;
  comm.all_reduce_max(&bad, 1, "the comparison of the ranks' flags");
  if (bad > 0) {
    const int m = int(comm.size() - bad);
    const std::string t0 = comm.broadcast(canonical, 0, "the comparison of the ranks' flags");
    const std::string tm = comm.broadcast(canonical, m, "the comparison of the ranks' flags");
    set_usage_errors_shared(true);
    throw UsageError("the ranks were started with different flags: " + first_difference(t0, tm, m) +
                     " (every rank of a data-parallel run must run the same command)");
  }
  set_usage_errors_shared(true);
}

}  // namespace liere::app
