// liere/io/atomic_file.hpp — the one atomic file write of liere (checkpoints, summaries, predictions, tables).
//
// write_file_atomic(path, data) writes the bytes to "<path>.tmp" (a loop of write() calls that retries on
// EINTR), fsyncs it, closes it, renames it over <path> and fsyncs the directory, so that a reader sees the old
// file or the new one, never half of one. On any failure — creating, writing, fsync, close, rename, or an
// exception from the on_write hook — the .tmp file is removed, <path> is left as it was, and the error (a
// liere::Error, or the hook's own exception) names `what`, the file and the reason:
//   save_safetensors: writing 'run/last.safetensors.tmp' failed after 4096 of 22104936 bytes: No space left on device
//
// Several pieces (a header, then each tensor) are written in order without joining them first:
//   write_file_atomic(path, {{&n, 8}, {header.data(), header.size()}, {w.data(), w.bytes}}, {.what = "..."});
//
// Writers that may race on one path (threads or processes filling a shared cache) ask for a temporary name of
// their own, "<path>.tmp-<pid>-<n>" (AtomicWriteOptions::unique("who")); the last rename wins and no reader sees half a file.
// A file that another library writes itself (an FFmpeg muxer) is written under unique_temp_path(path) and then
// made durable and moved into place by commit_file_atomic(temp, path).
#pragma once

#include <liere/core/config.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace liere::io {

struct AtomicWriteOptions {
  std::string what = "write_file_atomic";  // who writes: the first words of every error message
  // Called after each successful write() with (bytes written so far, total bytes); may throw (tests use it to
  // simulate a failure in the middle of a write).
  std::function<void(std::size_t written, std::size_t total)> on_write;
  // Write under "<path>.tmp-<pid>-<n>" (unique in this process and among processes) instead of "<path>.tmp".
  bool unique_temp = false;
  // fsync the file and its directory (false: still written whole under the temporary name and renamed, so no reader
  // sees half a file, but a crash of the machine may lose it: for many small files that can be made again, such as
  // a generated data set's images, where an fsync each would dominate the time).
  bool durable = true;

  // {what, unique_temp = true}: for writers that may race on one path.
  static AtomicWriteOptions unique(std::string what) {
    AtomicWriteOptions o;
    o.what = std::move(what);
    o.unique_temp = true;
    return o;
  }
};

// A run of bytes to write (not owned).
struct Bytes {
  const void* data = nullptr;
  std::size_t size = 0;
};

namespace detail {

inline std::string errno_text(int e) { return std::strerror(e); }

// The directory that holds `path` ("." for a bare file name).
inline std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
}

// fsyncs the directory that holds `path`, so that a rename into it survives a crash.
inline void fsync_directory_of(const std::string& path) {
  const int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace detail

// A temporary name beside `path` that no other writer uses: "<path>.tmp-<pid>-<n>".
inline std::string unique_temp_path(const std::string& path) {
  static std::atomic<unsigned long> counter{0};
  return path + ".tmp-" + std::to_string(long(::getpid())) + "-" + std::to_string(counter++);
}

// Makes the finished file `temp` durable (fsync) and renames it over `path`, then fsyncs the directory. On failure
// `temp` is removed, `path` is left as it was, and the liere::Error names `what`, the files and the reason.
inline void commit_file_atomic(const std::string& temp, const std::string& path, const std::string& what) {
  using detail::errno_text;
  const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    LIERE_ENSURE(false, what << ": cannot open '" << temp << "' to make it durable: " << errno_text(e));
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    LIERE_ENSURE(false, what << ": fsync of '" << temp << "' failed: " << errno_text(e));
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    LIERE_ENSURE(false, what << ": cannot rename '" << temp << "' to '" << path << "': " << errno_text(e));
  }
  detail::fsync_directory_of(path);
}

// Writes the pieces, in order, as the new content of `path`, atomically (see the file comment).
inline void write_file_atomic(const std::string& path, std::span<const Bytes> pieces, const AtomicWriteOptions& opt = {}) {
  using detail::errno_text;
  std::size_t total = 0;
  for (const Bytes& b : pieces) total += b.size;

  const std::string tmp = opt.unique_temp ? unique_temp_path(path) : path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LIERE_ENSURE(fd >= 0, opt.what << ": cannot create '" << tmp << "': " << errno_text(errno));
  bool fd_open = true;
  try {
    std::size_t written = 0;
    for (const Bytes& b : pieces) {
      const char* p = static_cast<const char*>(b.data);
      std::size_t left = b.size;
      while (left > 0) {
        const std::size_t chunk = std::min<std::size_t>(left, std::size_t(1) << 24);
        const ssize_t w = ::write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          const int e = w < 0 ? errno : EIO;
          LIERE_ENSURE(false, opt.what << ": writing '" << tmp << "' failed after " << written << " of " << total
                                       << " bytes: " << errno_text(e));
        }
        p += w;
        left -= std::size_t(w);
        written += std::size_t(w);
        if (opt.on_write) opt.on_write(written, total);
      }
    }
    if (opt.durable && ::fsync(fd) != 0) {
      const int e = errno;
      LIERE_ENSURE(false, opt.what << ": fsync of '" << tmp << "' failed: " << errno_text(e));
    }
    fd_open = false;
    if (::close(fd) != 0) {
      const int e = errno;
      LIERE_ENSURE(false, opt.what << ": closing '" << tmp << "' failed: " << errno_text(e));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int e = errno;
      LIERE_ENSURE(false, opt.what << ": cannot rename '" << tmp << "' to '" << path << "': " << errno_text(e));
    }
  } catch (...) {
    if (fd_open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (opt.durable) detail::fsync_directory_of(path);  // make the rename itself durable
}

inline void write_file_atomic(const std::string& path, std::initializer_list<Bytes> pieces,
                              const AtomicWriteOptions& opt = {}) {
  write_file_atomic(path, std::span<const Bytes>(pieces.begin(), pieces.size()), opt);
}

// The same for one string of bytes.
inline void write_file_atomic(const std::string& path, std::string_view data, const AtomicWriteOptions& opt = {}) {
  const Bytes one{data.data(), data.size()};
  write_file_atomic(path, std::span<const Bytes>(&one, 1), opt);
}

}  // namespace liere::io
