// examples/app/flags.cpp — the command-line parser of the programs.
#include <app/flags.hpp>

#include <app/comm.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <utility>

namespace liere::app {

namespace {
// A default value as the --help text shows it.
// An int flag's value: to_int's, and in int's range.
int to_int32(const std::string& s) {
  const long long v = Flags::to_int(s);
  LIERE_ENSURE(v >= INT_MIN && v <= INT_MAX, "expected an integer in [" << INT_MIN << ", " << INT_MAX << "], got '" << s << "'");
  return int(v);
}

template <class T>
std::string text(const T& v) {
  std::ostringstream d;
  d << v;
  return d.str();
}
}  // namespace

Flags::Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::section(const std::string& title) { help_ << "\n" << title << ":\n"; }

void Flags::add(const std::string& name, int* v, const std::string& help) {
  opt(name, "N", help, text(*v), [v](const std::string& s) { *v = to_int32(s); });
  getters_[name] = [v] { return text(*v); };
}
void Flags::add(const std::string& name, std::int64_t* v, const std::string& help) {
  opt(name, "N", help, text(*v), [v](const std::string& s) { *v = to_int(s); });
  getters_[name] = [v] { return text(*v); };
}
void Flags::add(const std::string& name, double* v, const std::string& help) {
  opt(name, "X", help, text(*v), [v](const std::string& s) { *v = to_double(s); });
  getters_[name] = [v] {
    std::ostringstream o;
    o << std::setprecision(17) << *v;
    return o.str();
  };
}
void Flags::add(const std::string& name, std::string* v, const std::string& help, const std::string& metavar) {
  opt(name, metavar, help, v->empty() ? std::string("none") : *v, [v](const std::string& s) { *v = s; });
  getters_[name] = [v] { return *v; };
}
void Flags::add(const std::string& name, std::vector<int>* v, const std::string& help) {
  std::string d;
  for (std::size_t i = 0; i < v->size(); ++i) {
    if (i) d += ',';
    d += std::to_string((*v)[i]);
  }
  opt(name, "LIST", help, d.empty() ? std::string("none") : d, [v](const std::string& s) {
    v->clear();
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) v->push_back(to_int32(item));
  });
  getters_[name] = [v] {
    std::string t;
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (i) t += ',';
      t += std::to_string((*v)[i]);
    }
    return t;
  };
}
void Flags::add_switch(const std::string& name, bool* v, const std::string& help) {
  switches_[name] = v;
  getters_[name] = [v] { return std::string(*v ? "on" : "off"); };
  help_ << "  --" << std::left << std::setw(19) << name << " " << help << "\n";
}
void Flags::add_pe(PEConfig* pe) {
  pe_ = pe;
  help_ << "\nPosition encoding:\n" << PEConfig::flags_help();
}

std::string Flags::usage() const {
  return "usage: " + program_ + " [options]\n" + summary_ + "\n" + help_.str() + "\n  --help               this text\n";
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage();
      return false;
    }
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq), has_value = true;
    if (auto s = switches_.find(name); s != switches_.end()) {
      if (has_value) throw UsageError("--" + name + " takes no value");
      *s->second = true;
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
        throw UsageError("--" + name + " " + value + ": " + e.what());
      }
      continue;
    }
    if (pe_) {
      bool known = false;
      try {
        known = pe_->set(name, value);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      if (known) continue;
    }
    throw UsageError("unknown option --" + name);
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

double Flags::to_double(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  LIERE_ENSURE(!s.empty() && end && *end == '\0', "expected a number, got '" << s << "'");
  LIERE_ENSURE(std::isfinite(v), "expected a finite number, got '" << s << "'");
  return v;
}

void Flags::opt(const std::string& name, const std::string& metavar, const std::string& help, const std::string& def,
                std::function<void(const std::string&)> set) {
  setters_[name] = std::move(set);
  help_ << "  --" << std::left << std::setw(19) << (name + " " + metavar) << " " << help << "  [" << def << "]\n";
}

}  // namespace liere::app
