// The devices of this build: the CPU's registration, built in, and the CUDA backend's, which
// lives in a library of its own (libcotensor_cuda, src/cuda/registration.cpp) loaded beside
// this one with the first question about a CUDA device, as PyTorch keeps libtorch_cuda apart.
// A build or an installation without it runs on the CPU and says why CUDA devices are refused.

#include "cotensor/config.hpp"

#include "cotensor/detail/waiter.hpp"
#include "cotensor/error.hpp"

#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "engine/backend.hpp"
#include "kernels/kernel_table.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <system_error>

#if COTENSOR_WITH_CUDA
#include <dlfcn.h>
#endif

namespace cotensor::detail {
namespace {

constexpr device_registration cpu_registration{
    .make_backend = cpu::make_backend,
    .await_fence = nullptr,
    .allocator = &cpu::host_memory,
    .kernels = &cpu::kernel_table_of_cpu,
    .device_count = []() noexcept { return 1; },
    .usable = [](int /*index*/) noexcept { return true; },
    .unavailable_reason = [](int /*index*/) { return std::string(); },
};

struct loaded_registration {
  const device_registration* registration = nullptr;
  std::string error;  // why there is none
};

#if COTENSOR_WITH_CUDA
// The CUDA backend's library, by its soname, from the folder this library was loaded from
// (the build tree or the installation's lib/), else wherever the dynamic linker looks.
loaded_registration load_cuda() noexcept {
  loaded_registration out;
  try {
    std::string tried;
    void* handle = nullptr;
    Dl_info self{};
    if (dladdr(reinterpret_cast<const void*>(&load_cuda), &self) != 0 && self.dli_fname) {
      std::string path = self.dli_fname;
      path.resize(path.find_last_of('/') + 1);
      path += COTENSOR_CUDA_PLUGIN;
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        tried = dlerror();
      }
    }
    if (handle == nullptr) {
      handle = dlopen(COTENSOR_CUDA_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    }
    if (handle == nullptr) {
      out.error = "this build's CUDA backend, " COTENSOR_CUDA_PLUGIN ", could not be loaded (" +
                  (tried.empty() ? std::string(dlerror()) : tried) +
                  "): build it (cmake --build <build> --target cotensor_cuda) or install it "
                  "beside libcotensor";
      return out;
    }
    using entry = const device_registration* (*)() noexcept;
    auto* get = reinterpret_cast<entry>(dlsym(handle, "cotensor_cuda_registration"));
    if (get == nullptr) {
      out.error = COTENSOR_CUDA_PLUGIN " has no cotensor_cuda_registration (another version?)";
      return out;
    }
    out.registration = get();  // the library stays loaded for the life of the process
  } catch (const std::bad_alloc&) {
    out.error = "out of memory loading the CUDA backend";
  }
  return out;
}
#endif

const loaded_registration& cuda_registration() noexcept {
#if COTENSOR_WITH_CUDA
  static const loaded_registration loaded = load_cuda();
#else
  static const loaded_registration loaded{
      nullptr, "this build has no CUDA backend (configured with COTENSOR_WITH_CUDA=OFF or "
               "without the CUDA toolkit)"};
#endif
  return loaded;
}

// The registration of a device type, or null where this build or installation has none.
const device_registration* find(device::kind type) noexcept {
  switch (type) {
  case device::kind::cpu:
    return &cpu_registration;
  case device::kind::cuda:
    return cuda_registration().registration;
  }
  return nullptr;
}

const device_registration& registered(device d) {
  if (const device_registration* r = find(d.type); r != nullptr && r->usable(d.index)) {
    return *r;
  }
  throw std::system_error(make_error_code(errc::device_unavailable),
                          "cotensor: " + unavailable_message(d));
}

}  // namespace

bool has_device_backend(device d) noexcept {
  const device_registration* r = find(d.type);
  return r != nullptr && r->usable(d.index);
}

std::string unavailable_reason(device d) {
  if (const device_registration* r = find(d.type)) {
    return r->unavailable_reason(d.index);
  }
  return cuda_registration().error;
}

std::string unavailable_message(device d) {
  return "device cuda:" + std::to_string(d.index) + " is not available (" +
         detail::unavailable_reason(d) + ")";
}

int device_count(device::kind type) noexcept {
  const device_registration* r = find(type);
  return r != nullptr ? r->device_count() : 0;
}

std::unique_ptr<backend> make_backend(device::kind type, const engine_options& options) {
  return registered(device{type, 0}).make_backend(options);
}

void await_fence(device d, std::uint64_t fence, waiter& w) {
  const device_registration* r = find(d.type);
  if (fence == 0 || r == nullptr || r->await_fence == nullptr) {
    w.complete(nullptr);
    return;
  }
  r->await_fence(d, fence, w);
}

void backend::launched(op_node* /*op*/, op_completion done) noexcept { done(); }

device_allocator& device_allocator_of(device d) { return *registered(d).allocator; }

constinit device_allocator* const cpu_allocator = &cpu::host_memory;
constinit const kernel_table* const cpu_kernel_table = &cpu::kernel_table_of_cpu;

const kernel_table& device_kernels(device d) { return *registered(d).kernels; }

}  // namespace cotensor::detail
