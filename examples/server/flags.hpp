#pragma once

// cotensor_server's command line (cotensor_server.cpp): the flags, what they set, and --help.

#include <cotensor/device.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace cotensor_server {

// The flags' values; the defaults are the flags' defaults.
struct flags {
  std::string address = "127.0.0.1";
  unsigned short port = 8000;
  unsigned threads = 1;
  std::string model_repository = COTENSOR_EXAMPLE_MODELS;
  bool batching = true;
  std::size_t max_running_batches = 1;
  std::string device = "cpu";
  std::size_t max_body = 64 << 20;
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds drain_timeout{30000};
  std::size_t max_queue_rows = 4096;
  std::size_t max_connections = 4096;
  std::size_t stream_send_buffer_bytes = 64 << 10;  // 0: the system's
  std::chrono::microseconds debug_delay{0};  // testing: each forward pass takes this long more
  bool help = false;                         // --help: print `usage` and exit
};

// What --help prints.
extern const char* const usage;

// The flags of `argv`. Throws std::invalid_argument naming a flag that is unknown, has no value
// or a malformed one.
flags parse_flags(int argc, char** argv);

// "cpu" or "cuda[:N]". Throws std::invalid_argument for anything else.
cotensor::device parse_device(const std::string& s);

}  // namespace cotensor_server
