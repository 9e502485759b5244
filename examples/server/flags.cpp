// cotensor_server's command line: parsing the flags of flags.hpp.

#include "flags.hpp"

#include <algorithm>
#include <stdexcept>

namespace cotensor_server {

const char* const usage =
    "usage: cotensor_server [--model-repository DIR] [--address A] [--port N] [--threads N]\n"
    "         [--no-batching] [--max-running-batches N] [--device cpu|cuda:N]\n"
    "         [--max-body-bytes N] [--timeout-ms N] [--drain-timeout-ms N]\n"
    "         [--max-queue-rows N] [--max-connections N] [--stream-send-buffer-bytes N]\n"
    "         [--debug-delay-us N]\n"
    "  --model-repository DIR  Triton's layout: DIR/<model>/config.json and\n"
    "                          DIR/<model>/<version>/model.safetensors (default: the example\n"
    "                          models, " COTENSOR_EXAMPLE_MODELS ")\n";

flags parse_flags(int argc, char** argv) {
  flags c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(flag + " needs a value");
      }
      return argv[++i];
    };
    auto number = [&] {
      const std::string v = value();
      std::size_t used = 0;
      const long long n = std::stoll(v, &used);
      if (used != v.size() || n < 0) {
        throw std::invalid_argument(flag + " needs a non-negative integer, not '" + v + "'");
      }
      return n;
    };
    if (flag == "--help") {
      c.help = true;
      return c;
    } else if (flag == "--model-repository") {
      c.model_repository = value();
    } else if (flag == "--address") {
      c.address = value();
    } else if (flag == "--port") {
      c.port = static_cast<unsigned short>(number());
    } else if (flag == "--threads") {
      c.threads = static_cast<unsigned>(std::max(1LL, number()));
    } else if (flag == "--max-running-batches") {
      c.max_running_batches = static_cast<std::size_t>(std::max(1LL, number()));
    } else if (flag == "--no-batching") {
      c.batching = false;
    } else if (flag == "--device") {
      c.device = value();
    } else if (flag == "--max-body-bytes") {
      c.max_body = static_cast<std::size_t>(number());
    } else if (flag == "--timeout-ms") {
      c.timeout = std::chrono::milliseconds(number());
    } else if (flag == "--drain-timeout-ms") {
      c.drain_timeout = std::chrono::milliseconds(number());
    } else if (flag == "--max-queue-rows") {
      c.max_queue_rows = static_cast<std::size_t>(std::max(1LL, number()));
    } else if (flag == "--debug-delay-us") {
      c.debug_delay = std::chrono::microseconds(number());
    } else if (flag == "--max-connections") {
      c.max_connections = static_cast<std::size_t>(number());
    } else if (flag == "--stream-send-buffer-bytes") {
      c.stream_send_buffer_bytes = static_cast<std::size_t>(number());
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  return c;
}

cotensor::device parse_device(const std::string& s) {
  if (s == "cpu") {
    return cotensor::device::cpu();
  }
  if (s.rfind("cuda", 0) == 0) {
    const int index = s.size() > 5 ? std::stoi(s.substr(5)) : 0;
    return cotensor::device::cuda(index);
  }
  throw std::invalid_argument("unknown device " + s);
}

}  // namespace cotensor_server
