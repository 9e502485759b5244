#pragma once

// Test support: an environment variable set for a scope, for the tests of what cotensor reads from
// the environment. Set and restore it while none of cotensor's threads reads the environment (no op
// runs): setenv may free the array that a concurrent getenv walks.

#include <cstdlib>
#include <optional>
#include <string>

namespace cotensor::test {

/// Sets `name` to `value` for the life of the object, then restores what it was (or unsets it).
class scoped_environment {
public:
  scoped_environment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    ::setenv(name, value, 1);
  }
  scoped_environment(const scoped_environment&) = delete;
  scoped_environment& operator=(const scoped_environment&) = delete;
  ~scoped_environment() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace cotensor::test
