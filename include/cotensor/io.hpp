#pragma once

#include "cotensor/device.hpp"
#include "cotensor/tensor.hpp"

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cotensor {

/// A file that cannot be read or written as asked: missing, unreadable, malformed, truncated,
/// or changed while its tensors were being read. `what()` names the file and, where one is
/// concerned, the tensor: `cotensor::load_safetensors: model.safetensors: tensor "w1": data
/// ends at byte 4096, beyond the file's 4000 bytes`.
class io_error : public std::runtime_error {
public:
  /// An error about `path` (and the tensor `tensor_name`, if not empty) for `reason`.
  io_error(const char* op,
           const std::filesystem::path& path,
           std::string tensor_name,
           const std::string& reason);
  /// The file.
  const std::filesystem::path& path() const noexcept { return path_; }
  /// The tensor concerned; empty when the error is about the file as a whole.
  const std::string& tensor_name() const noexcept { return tensor_name_; }

private:
  std::filesystem::path path_;
  std::string tensor_name_;
};

/// The named tensors and the metadata of a safetensors file.
///
/// `tensors` keeps the file's order (by data offset); names are unique. `metadata` is the
/// header's `__metadata__` map of strings (empty if absent).
struct safetensors_file {
  std::vector<std::pair<std::string, tensor>> tensors;  ///< name and tensor, in file order
  std::map<std::string, std::string> metadata;          ///< the header's `__metadata__`

  /// The tensor named `name`; throws `std::out_of_range` naming it if there is none.
  const tensor& at(std::string_view name) const;
  /// True if there is a tensor named `name`.
  bool contains(std::string_view name) const noexcept;
};

/// Loads the tensors of the safetensors file `path` onto `d`, asynchronously.
///
/// The header is read and validated in the call: dtypes `BOOL I32 I64 F16 BF16 F32 F64`,
/// extents, data offsets that tile the data section exactly (sorted, no gap, no overlap, none
/// beyond the file), each tensor's byte count equal to its elements times its itemsize, unique
/// names. The tensors' bytes are then read by one op per tensor, on cotensor's read threads
/// (`COTENSOR_IO_THREADS`, default 2; never a backend worker or the calling thread), into host
/// memory (a tensor on a GPU is copied there after), so the call returns before they are read.
///
/// Errors: `io_error` in the call for a file that cannot be opened or whose header is invalid,
/// naming the file and the tensor at fault; `std::system_error(errc::device_unavailable)` for a
/// device this build or machine cannot serve. A file that shrinks or changes size between the
/// call and the read fails the tensors it affects: waiting on them rethrows an `io_error`
/// naming the file and the tensor (never a short or out-of-bounds read).
/// Thread safety: any thread; concurrent loads of one file are fine. The file must not be
/// rewritten in place until the tensors are computed (a replaced file, renamed over it, is
/// not seen: the file stays open until its last tensor is read).
safetensors_file load_safetensors(const std::filesystem::path& path, device d = device::cpu());

/// Writes `tensors` (unique, non-empty names other than `__metadata__`) and `metadata` to
/// `path` as a safetensors file, replacing it. Blocks until every tensor is computed and the
/// file is written; tensors are laid out as the Python `safetensors` package lays them out
/// (by decreasing itemsize, then name), so each is aligned to its itemsize.
///
/// Errors: `std::invalid_argument` for an empty tensor handle, a duplicate or reserved name;
/// an op's exception, as `tensor::wait`; `io_error` if the file cannot be written.
/// Thread safety: any thread but an Asio event loop's or a backend's (it blocks).
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
/// Writes `file.tensors` and `file.metadata` to `path`, as above.
void save_safetensors(const std::filesystem::path& path, const safetensors_file& file);

/// Loads the NumPy `.npy` file `path` onto `d`, asynchronously, as `load_safetensors`: the
/// header is validated in the call, the bytes are read on the read threads.
///
/// Formats: versions 1.0, 2.0 and 3.0; C order (`'fortran_order': False`) only; descr `'|b1'`,
/// `'<i4'`, `'<i8'`, `'<f2'`, `'<f4'`, `'<f8'` (`'='` and `'|'` byte orders too where they mean
/// little-endian on this little-endian host), and for bfloat16 the descr `'bfloat16'` (what
/// `save_npy` writes, which NumPy with `ml_dtypes` imported reads) or `'<V2'` (what `np.save`
/// writes for an `ml_dtypes.bfloat16` array: a 2-byte opaque type, read as bfloat16).
/// Errors: as `load_safetensors` (the tensor name in an `io_error` is empty: the file holds
/// one array); a big-endian or other descr, or Fortran order, is an `io_error` saying so.
/// Thread safety: as `load_safetensors`.
tensor load_npy(const std::filesystem::path& path, device d = device::cpu());

/// Writes `t` to `path` as a version 1.0 `.npy` file in C order (version 2.0 if its header
/// needs it), replacing it; blocks until `t` is computed and the file is written. Descrs as
/// `load_npy` reads them; bfloat16 is written with the descr `'bfloat16'`.
/// Errors: as `save_safetensors`.
/// Thread safety: as `save_safetensors`.
void save_npy(const std::filesystem::path& path, const tensor& t);

}  // namespace cotensor
