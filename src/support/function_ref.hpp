#pragma once

#include <memory>
#include <type_traits>

namespace cotensor::detail {

/// A non-owning reference to a callable, for loop bodies that live on the caller's stack for
/// the whole call: passing one never allocates, whatever the body captures (a std::function
/// would allocate for captures over 16 bytes on every op).
template <class Signature>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
public:
  // Implicit, like std::function's: call sites pass a lambda.
  template <class F,
            class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, function_ref>>>
  function_ref(F&& f) noexcept
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(args...);
        }) {}

  R operator()(Args... args) const { return call_(object_, args...); }

private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace cotensor::detail
