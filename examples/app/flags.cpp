// examples/app/flags.cpp — the command-line parser of the programs.
#include <app/flags.hpp>

#include <app/comm.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <utility>

namespace liere::app {

namespace {
// An int flag's value: to_int's, and in int's range.
int to_int32(const std::string& s) {
  const long long v = Flags::to_int(s);
  LIERE_ENSURE(v >= INT_MIN && v <= INT_MAX, "expected an integer in [" << INT_MIN << ", " << INT_MAX << "], got '" << s << "'");
  return int(v);
}

// A value as --help and canonical() show it.
template <class T>
std::string text(const T& v) {
  std::ostringstream d;
  d << v;
  return d.str();
}
// A double as canonical() compares it: every digit.
std::string exact(double v) {
  std::ostringstream o;
  o << std::setprecision(17) << v;
  return o.str();
}
std::string text(const std::vector<int>& v) {
  std::string t;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) t += ',';
    t += std::to_string(v[i]);
  }
  return t;
}
std::string text(const std::vector<std::string>& v) {
  std::string t;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) t += ' ';
    t += v[i];
  }
  return t;
}

// A flag's help text and `suffix` (its default), broken at spaces into lines of at most 110 columns, the later
// ones indented under the first.
std::string wrap(const std::string& text, const std::string& suffix = "") {
  constexpr std::size_t kIndent = 24, kWidth = 110 - kIndent;
  std::string out, line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > kWidth) {
      out += line;
      out += '\n';
      out.append(kIndent, ' ');
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += w;
  }
  if (!suffix.empty() && !line.empty() && line.size() + suffix.size() > kWidth) {
    out += line;
    out += '\n';
    out.append(kIndent, ' ');
    line = suffix.substr(2);  // without the two spaces that separate it from the text
  } else {
    line += suffix;
  }
  return out + line;
}

// "an integer in [2, 1024]" / "a number in [0, 64]".
void check_range(double v, const std::optional<Range>& r, const char* what) {
  auto end = [](double x) { return x == std::floor(x) && std::fabs(x) < 1e15 ? std::to_string((long long)x) : text(x); };
  if (r) LIERE_ENSURE(v >= r->lo && v <= r->hi, "expected " << what << " in [" << end(r->lo) << ", " << end(r->hi) << "]");
}
}  // namespace

Flags::Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::section(const std::string& title) { help_ << "\n" << title << ":\n"; }

void Flags::add(const std::string& name, int* v, const std::string& help, std::optional<Range> range) {
  opt(name, "N", help, text(*v), [v, range](const std::string& s) {
        const int x = to_int32(s);
        check_range(x, range, "an integer");
        *v = x;
      }, [v] { return text(*v); });
}
void Flags::add(const std::string& name, std::int64_t* v, const std::string& help, std::optional<Range> range) {
  opt(name, "N", help, text(*v), [v, range](const std::string& s) {
        const long long x = to_int(s);
        check_range(double(x), range, "an integer");
        *v = x;
      }, [v] { return text(*v); });
}
void Flags::add(const std::string& name, std::uint64_t* v, const std::string& help) {
  opt(name, "N", help, text(*v), [v](const std::string& s) { *v = to_uint(s); }, [v] { return text(*v); });
}
void Flags::add(const std::string& name, double* v, const std::string& help, std::optional<Range> range) {
  opt(name, "X", help, text(*v), [v, range](const std::string& s) {
        const double x = to_double(s);
        check_range(x, range, "a number");
        *v = x;
      }, [v] { return exact(*v); });
}
void Flags::add(const std::string& name, std::optional<double>* v, const std::string& help) {
  opt(name, "X", help, *v ? text(**v) : std::string("none"), [v](const std::string& s) { *v = to_double(s); },
      [v] { return *v ? exact(**v) : std::string("none"); });
}
void Flags::add(const std::string& name, std::string* v, const std::string& help, const std::string& metavar) {
  opt(name, metavar, help, v->empty() ? std::string("none") : *v, [v](const std::string& s) { *v = s; },
      [v] { return *v; });
}
void Flags::add(const std::string& name, std::vector<int>* v, const std::string& help) {
  opt(name, "LIST", help, v->empty() ? std::string("none") : text(*v), [v](const std::string& s) {
        v->clear();
        std::stringstream ss(s);
        std::string item;
        while (std::getline(ss, item, ',')) v->push_back(to_int32(item));
      }, [v] { return text(*v); });
}
void Flags::add(const std::string& name, std::vector<std::string>* v, const std::string& help, const std::string& metavar) {
  opt(name, metavar, help, v->empty() ? std::string("none") : text(*v), [v](const std::string& s) { v->push_back(s); },
      [v] { return text(*v); });
}
void Flags::add(const std::string& name, const std::string& metavar, const std::string& help,
                std::function<void(const std::string&)> set, std::function<std::string()> get) {
  const std::string def = get();
  opt(name, metavar, help, def.empty() ? std::string("none") : def, std::move(set), std::move(get));
}
void Flags::add_switch(const std::string& name, bool* v, const std::string& help) {
  switches_[name] = v;
  getters_[name] = [v] { return std::string(*v ? "on" : "off"); };
  help_ << "  --" << std::left << std::setw(19) << name << " " << wrap(help) << "\n";
}
void Flags::add_pe(PEConfig* pe) {
  pe_ = pe;
  // A flag the program declared itself (pe_diagnostics' --pe KIND|all) is listed once, where it declared it.
  help_ << "\nPosition encoding:\n"
        << PEConfig::flags_help([this](const std::string& name) { return setters_.count(name) > 0; });
}
void Flags::positional(const std::string& metavar, std::vector<std::string>* v, const std::string& help) {
  positional_ = v;
  positional_metavar_ = metavar;
  help_ << "  " << std::left << std::setw(21) << metavar << " " << wrap(help) << "\n";
  getters_[" args"] = [v] { return text(*v); };  // a name no flag has
}

std::string Flags::usage() const {
  return "usage: " + program_ + " [options]" + (positional_ ? " " + positional_metavar_ : std::string()) + "\n" +
         summary_ + "\n" + help_.str() + "\n  --help               this text\n";
}

bool Flags::parse(int argc, char** argv) {
  given_.clear();
  std::string pe_value, block_value;  // as given: a label with a block size (liere8) must agree with a --block
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage();
      return false;
    }
    if (a.rfind("--", 0) != 0) {
      if (!positional_) throw UsageError("unexpected argument '" + a + "'");
      positional_->push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq), has_value = true;
    if (auto s = switches_.find(name); s != switches_.end()) {
      if (has_value) throw UsageError("--" + name + " takes no value");
      *s->second = true;
      given_.insert(name);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) throw UsageError(known(name) ? "--" + name + " needs a value" : "unknown option --" + name);
      value = argv[++i];
    }
    if (auto o = setters_.find(name); o != setters_.end()) {
      try {
        o->second(value);
      } catch (const Error& e) {
        throw UsageError("--" + name + " " + value + ": " + e.message());
      }
      given_.insert(name);
      continue;
    }
    if (pe_) {
      bool known = false;
      try {
        known = pe_->set(name, value);
      } catch (const Error& e) {
        throw UsageError(e.message());
      }
      if (known) {
        given_.insert(name);
        if (name == "pe") pe_value = value;
        if (name == "block") block_value = value;
        continue;
      }
    }
    throw UsageError("unknown option --" + name);
  }
  if (!pe_value.empty() && !block_value.empty()) {  // (both are set only through pe_)
    PEConfig label, block;
    label.block = 0;  // set("pe") changes it only for a label with a block size
    label.set("pe", pe_value);
    block.set("block", block_value);
    if (label.block != 0 && label.block != block.block)
      throw UsageError("--pe " + pe_value + " and --block " + block_value + " disagree: give the block size once");
    // --block with an encoding that does not take it is accepted (scripts pass one set of flags to every encoding),
    // and said.
    const PEKindInfo& info = pe_->info();
    if (!info.rotary || info.fixed_block)
      std::cerr << "note: --block " << block_value << " is not used by --pe " << pe_value
                << (info.rotary ? " (its blocks are " + std::to_string(info.fixed_block) + "x" +
                                      std::to_string(info.fixed_block) + ")"
                                : " (it has no rotation blocks)")
                << "\n";
  }
  // A data-parallel run: every rank must have the same options (but its thread count).
  if (Comm::world().distributed()) check_same_flags(Comm::world(), canonical({"threads"}));
  return true;
}

bool Flags::known(const std::string& name) const {
  if (setters_.count(name)) return true;
  if (!pe_) return false;
  try {
    PEConfig scratch;
    return scratch.set(name, "");
  } catch (const Error&) {
    return true;
  }
}

std::string Flags::canonical(const std::vector<std::string>& ignore) const {
  std::string out;
  for (const auto& [name, get] : getters_)
    if (std::find(ignore.begin(), ignore.end(), name) == ignore.end()) out += name + "=" + get() + "\n";
  if (pe_) out += "pe=" + pe_->describe() + "\n";
  return out;
}

namespace {
int print_and_return(const std::string& text, int code, bool) {
  std::cerr << text;
  return code;
}
ErrorExit g_error_exit = print_and_return;
std::string g_error_prefix;
bool g_usage_shared = false;
}  // namespace

void set_error_exit(ErrorExit f) { g_error_exit = f ? f : print_and_return; }
int error_exit(const std::string& text, int code, bool all_ranks) { return g_error_exit(text, code, all_ranks); }
void set_error_prefix(const std::string& prefix) { g_error_prefix = prefix; }
const std::string& error_prefix() { return g_error_prefix; }
void set_usage_errors_shared(bool shared) { g_usage_shared = shared; }
bool usage_errors_shared() { return g_usage_shared; }

long long Flags::to_int(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  LIERE_ENSURE(!s.empty() && end && *end == '\0', "expected an integer, got '" << s << "'");
  LIERE_ENSURE(errno != ERANGE, "expected an integer in [" << LLONG_MIN << ", " << LLONG_MAX << "], got '" << s << "'");
  return v;
}

std::uint64_t Flags::to_uint(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  LIERE_ENSURE(!s.empty() && s[0] >= '0' && s[0] <= '9' && end && *end == '\0',
               "expected a non-negative integer, got '" << s << "'");
  LIERE_ENSURE(errno != ERANGE, "expected an integer in [0, " << ULLONG_MAX << "], got '" << s << "'");
  return v;
}

double Flags::to_double(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  LIERE_ENSURE(!s.empty() && end && *end == '\0', "expected a number, got '" << s << "'");
  LIERE_ENSURE(std::isfinite(v), "expected a finite number, got '" << s << "'");
  return v;
}

void Flags::opt(const std::string& name, const std::string& metavar, const std::string& help, const std::string& def,
                std::function<void(const std::string&)> set, std::function<std::string()> get) {
  setters_[name] = std::move(set);
  getters_[name] = std::move(get);
  help_ << "  --" << std::left << std::setw(19) << (name + " " + metavar) << " " << wrap(help, "  [" + def + "]") << "\n";
}

void check_output_folder(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
    throw UsageError(flag + " " + path + ": the folder '" + folder.string() + "' does not exist");
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(flag + " " + path + ": is a folder; give the path of a file (e.g. " +
                     (std::filesystem::path(path) / "<name>").string() + ")");
  // Files are written as PATH.tmp, then renamed: the folder must take new files.
  const std::string where = folder.empty() ? "." : folder.string();
  if (::access(where.c_str(), W_OK | X_OK) != 0)
    throw UsageError(flag + " " + path + ": the folder '" + where + "' is not writable (" + std::strerror(errno) + ")");
}

}  // namespace liere::app
